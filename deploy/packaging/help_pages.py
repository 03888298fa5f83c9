#!/usr/bin/env python3
"""Man pages and bash completion, made from the binaries' own --help (so they cannot drift).

Usage: help_pages.py SKYTRAIN SKYTRAIND VERSION OUT_DIR
Writes OUT_DIR/skytrain.1, OUT_DIR/skytraind.1 and OUT_DIR/skytrain.bash-completion.
"""
import re
import subprocess
import sys


def help_of(binary, *words):
    out = subprocess.run([binary, *words, "--help"], capture_output=True, text=True, check=True).stdout
    return out.replace(binary, binary.rsplit("/", 1)[-1])


def sections(text):
    """The help text's parts: (summary, usage, {section title: [(name, description)]})."""
    lines = text.splitlines()
    summary, usage, parts, current = lines[0], "", {}, None
    for line in lines[1:]:
        if line.startswith("Usage: "):
            usage = line[len("Usage: "):]
        elif re.match(r"^[A-Z][A-Za-z]*:$", line):
            current = parts.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and line.strip():
            m = re.match(r"^  (\S.*?)(?:\s{2,}(.*))?$", line)
            if line.startswith("     ") and current:  # a description wrapped under its name
                name, description = current[-1]
                current[-1] = (name, (description + " " + line.strip()).strip())
            elif m:
                current.append((m.group(1), m.group(2) or ""))
    return summary, usage, parts


def roff(text):
    return text.replace("\\", "\\e").replace("-", "\\-").replace("'", "\\(aq")


def man_page(name, version, text, commands):
    summary, usage, parts = sections(text)
    out = [f'.TH {name.upper()} 1 "" "skytrain {version}" "User Commands"', ".SH NAME",
           f"{name} \\- {roff(summary.split(': ', 1)[-1])}", ".SH SYNOPSIS", f".B {roff(usage)}"]
    for title, entries in parts.items():
        out.append(f".SH {title.upper()}")
        for entry, description in entries:
            out += [".TP", f".B {roff(entry)}", roff(description)]
    for words, sub in commands:
        sub_summary, sub_usage, sub_parts = sections(sub)
        out += [f'.SH "{roff(name + " " + " ".join(words)).upper()}"', roff(sub_summary), ".PP", f".B {roff(sub_usage)}"]
        for title, entries in sub_parts.items():
            if title == "Subcommands":
                continue
            for entry, description in entries:
                if entry.startswith("-h,--help"):
                    continue
                out += [".TP", f".B {roff(entry)}", roff(description)]
    out += [".SH SEE ALSO", "The documentation in /usr/share/doc/skytrain (docs/cli.md, docs/operations.md)."]
    return "\n".join(out) + "\n"


def options_of(text):
    found = []
    for title, entries in sections(text)[2].items():
        if title != "Options":
            continue
        for entry, _ in entries:
            for flag in re.findall(r"(?:^|,)(--?[A-Za-z][\w-]*)", entry.split(" ")[0]):
                found.append(flag.lstrip("!"))
    return found


def completion(skytrain):
    top = help_of(skytrain)
    commands = [name.split()[0] for name, _ in sections(top)[2].get("Subcommands", [])]
    cases = []
    for command in commands:
        sub = help_of(skytrain, command)
        words = options_of(sub)
        nested = [name.split()[0] for name, _ in sections(sub)[2].get("Subcommands", [])]
        for inner in nested:
            words += options_of(help_of(skytrain, command, inner))
        cases.append(f'    {command}) words="{" ".join(nested + sorted(set(words)))}" ;;')
    return f"""# bash completion for skytrain, made from its --help
_skytrain() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} command="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      -k|--key|--daemon-key|--known-daemons|-d|--daemon|--timeout-ms) ((i++)) ;;  # and its value
      -*) ;;
      *) command=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  local words
  case $command in
    "") words="{" ".join(commands + options_of(top))}" ;;
{chr(10).join(cases)}
    *) words="" ;;
  esac
  if [[ $cur == -* || -z $command ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur") $(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _skytrain skytrain
"""


def main():
    skytrain, skytraind, version, out = sys.argv[1:5]
    top = help_of(skytrain)
    commands = []
    for name, _ in sections(top)[2].get("Subcommands", []):
        command = name.split()[0]
        sub = help_of(skytrain, command)
        commands.append(([command], sub))
        for inner, _ in sections(sub)[2].get("Subcommands", []):
            commands.append(([command, inner.split()[0]], help_of(skytrain, command, inner.split()[0])))
    open(f"{out}/skytrain.1", "w").write(man_page("skytrain", version, top, commands))
    open(f"{out}/skytraind.1", "w").write(man_page("skytraind", version, help_of(skytraind), []))
    open(f"{out}/skytrain.bash-completion", "w").write(completion(skytrain))


if __name__ == "__main__":
    main()
