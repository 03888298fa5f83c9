#!/usr/bin/env bash
# The docs cannot rot: runs, literally, every ```sh block of docs/quickstart.md in order (as
# one script from a view of the repository root, HOME an empty folder, an unprivileged user's
# setting), then the ```sh blocks of docs/operations.md's "Keys for two clusters" with
# /etc/skytrain in a temporary folder (lines that start with `sudo systemctl`, `scp` or `ssh`
# move files between hosts or start services: skipped, the files being on this one machine;
# two_clusters_test.sh walks the section on emulated hosts, those lines included, as root),
# the ```sh block of "Keys for N clusters" the same way on three daemons' .pub files, and
# the README's `skytrain validate job.json` on the README's job spec.
# Usage: docs_commands_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$(cd "$1" && pwd) build_dir=$(cd "$2" && pwd)
work=$(mktemp -d)
group=
cleanup() {
  [ -n "$group" ] && kill -TERM -- "-$group" 2> /dev/null || true
  sleep 0.5
  [ -n "$group" ] && kill -KILL -- "-$group" 2> /dev/null || true
  [ -n "${KEEP_DOCS_WORK:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# sh_blocks FILE [HEADING]: the ```sh blocks of FILE (under the level-2 HEADING only, if given).
sh_blocks() {
  python3 - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
if len(sys.argv) > 2:
    m = re.search(r"^## " + re.escape(sys.argv[2]) + r"\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        sys.exit(f"{sys.argv[1]}: no section '## {sys.argv[2]}'")
    text = m.group(1)
blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
if not blocks:
    sys.exit(f"{sys.argv[1]}: no ```sh block")
print("\n".join(blocks))
PY
}

# A view of the repository root whose build/ is this build tree.
mkdir -p "$work/repo" "$work/home"
for entry in "$source_dir"/*; do ln -s "$entry" "$work/repo/$(basename "$entry")"; done
rm -f "$work/repo/build"
ln -s "$build_dir" "$work/repo/build"

{ echo "set -euo pipefail"; sh_blocks "$source_dir/docs/quickstart.md"; } > "$work/quickstart.sh"
echo "== docs/quickstart.md: $(grep -c . "$work/quickstart.sh") lines"
(cd "$work/repo" && HOME=$work/home XDG_CONFIG_HOME= SKYTRAIN_DAEMON= SKYTRAIN_KEY= SKYTRAIN_DAEMON_KEY= \
   SKYTRAIN_KNOWN_DAEMONS= setsid bash -x "$work/quickstart.sh") > "$work/quickstart.log" 2>&1 &
group=$!
if ! wait "$group"; then
  tail -60 "$work/quickstart.log"
  fail "docs/quickstart.md, run as written, failed"
fi
kill -TERM -- "-$group" 2> /dev/null || true
group=
echo "ok: docs/quickstart.md runs as written"

etc=$work/etc-skytrain
sh_blocks "$source_dir/docs/operations.md" "Keys for two clusters" |
  sed -e "s#/etc/skytrain#$etc#g" | grep -vE '^[[:space:]]*(sudo systemctl|scp|ssh)( |$)' > "$work/keys-body.sh"
{ echo "set -euo pipefail"; echo "PATH=$work/bin:\$PATH"; cat "$work/keys-body.sh"; } > "$work/keys.sh"
mkdir -p "$work/bin" "$work/home2"
ln -s "$build_dir/client/skytrain" "$work/bin/skytrain"
ln -s "$build_dir/daemon/skytraind" "$work/bin/skytraind"
grep -q '/etc/skytrain' "$work/keys.sh" && fail "a path under /etc/skytrain was not redirected"
grep -qE '^[[:space:]]*sudo ' "$work/keys.sh" && fail "the keys section needs sudo beyond systemctl"
(cd "$work" && HOME=$work/home2 XDG_CONFIG_HOME= SKYTRAIN_KNOWN_DAEMONS= bash -x "$work/keys.sh") > "$work/keys.log" 2>&1 ||
  { tail -40 "$work/keys.log"; fail "docs/operations.md \"Keys for two clusters\", run as written, failed"; }
ls "$etc"/* > /dev/null 2>&1 || fail "the keys section wrote nothing under /etc/skytrain"
echo "ok: docs/operations.md \"Keys for two clusters\" runs as written ($(ls "$etc" | tr '\n' ' '))"

# "Keys for N clusters": its block, run on three daemons' .pub files collected in
# /etc/skytrain/keys and named after their hosts' DNS names, as the section has them;
# /etc/skytrain redirected and `systemctl` lines skipped as above.
etcn=$work/etc-n
hosts="cloud-a.example cloud-b.example cloud-c.example"
mkdir -p "$etcn/keys"
for host in $hosts; do
  "$work/bin/skytrain" keygen "$host" --dir "$work/hosts/$host" --role daemon > /dev/null
  cp "$work/hosts/$host/$host.pub" "$etcn/keys/"
done
sh_blocks "$source_dir/docs/operations.md" "Keys for N clusters" |
  sed -e "s#/etc/skytrain#$etcn#g" | grep -vE '^[[:space:]]*(sudo )?(systemctl|scp|ssh)( |$)' > "$work/keys-n-body.sh"
{ echo "set -euo pipefail"; echo "PATH=$work/bin:\$PATH"; cat "$work/keys-n-body.sh"; } > "$work/keys-n.sh"
grep -q '/etc/skytrain' "$work/keys-n.sh" && fail "\"Keys for N clusters\": a path under /etc/skytrain was not redirected"
grep -qE '^[[:space:]]*sudo ' "$work/keys-n.sh" && fail "\"Keys for N clusters\" needs sudo beyond systemctl"
(cd "$work" && HOME=$work/home2 XDG_CONFIG_HOME= SKYTRAIN_KNOWN_DAEMONS= bash -x "$work/keys-n.sh") > "$work/keys-n.log" 2>&1 ||
  { tail -40 "$work/keys-n.log"; fail "docs/operations.md \"Keys for N clusters\", run as written, failed"; }
for host in $hosts; do
  key=$(cut -d' ' -f1 "$etcn/keys/$host.pub")
  grep -qxF -- "$key daemon $host" "$etcn/authorized_keys" ||  # a Z85 key may start with "-"
    { cat "$etcn/authorized_keys"; fail "\"Keys for N clusters\" did not admit $host as a daemon"; }
  grep -qxF "tcp://$host:7100 $key" "$etcn/known_daemons" ||
    { cat "$etcn/known_daemons"; fail "\"Keys for N clusters\" did not trust $host at tcp://$host:7100"; }
done
[ "$(grep -c . "$etcn/authorized_keys")" -eq 3 ] && [ "$(grep -c . "$etcn/known_daemons")" -eq 3 ] ||
  fail "\"Keys for N clusters\" wrote other lines than the three daemons'"
echo "ok: docs/operations.md \"Keys for N clusters\" runs as written (3 daemons admitted and trusted)"

# The README: its job spec (the ```json block under "A job spec") is the job.json that its
# `skytrain validate job.json` line, run as written, checks.
mkdir -p "$work/readme"
python3 - "$source_dir/README.md" "$work/readme" <<'PY' || fail "README.md: no job.json and validate line to run under \"## A job spec\""
import re, sys
readme, out = sys.argv[1:]
m = re.search(r"^## A job spec\s*$(.*?)(?=^## |\Z)", open(readme).read(), re.M | re.S)
if not m:
    sys.exit("README.md: no section '## A job spec'")
specs = re.findall(r"^```json\n(.*?)^```", m.group(1), re.M | re.S)
lines = [l for b in re.findall(r"^```sh\n(.*?)^```", m.group(1), re.M | re.S) for l in b.splitlines()
         if re.match(r"skytrain validate job\.json( |$)", l)]
if len(specs) != 1 or len(lines) != 1:
    sys.exit(f"README.md, '## A job spec': {len(specs)} ```json blocks and {len(lines)} "
             "'skytrain validate job.json' lines in ```sh blocks; expected one of each")
open(out + "/job.json", "w").write(specs[0])
open(out + "/validate.sh", "w").write("set -euo pipefail\n" + lines[0] + "\n")
PY
(cd "$work/readme" && PATH=$work/bin:$PATH HOME=$work/home2 XDG_CONFIG_HOME= bash -x validate.sh) > "$work/readme.log" 2>&1 ||
  { cat "$work/readme.log"; fail "README.md's \"skytrain validate job.json\" refused the README's job spec"; }
grep -q '^job.json: a valid job spec: ' "$work/readme.log" ||
  { cat "$work/readme.log"; fail "README.md's validate line did not check job.json"; }
echo "ok: README.md's \"skytrain validate job.json\" accepts the README's job spec"

# docs/models.md, "Bring your own model": its export line, run as written from the repository
# root with /var/lib/skytrain in a temporary folder, writes the stage modules and the job.json
# the next line submits (that line needs your daemons' endpoints: validated here instead).
var=$work/var-lib-skytrain
python3 - "$source_dir/docs/models.md" "$var" > "$work/tiny-lm.sh" <<'PY' || fail "docs/models.md: no tiny_lm.py line under \"## Bring your own model (TorchScript)\""
import re, sys
text, var = open(sys.argv[1]).read(), sys.argv[2]
m = re.search(r"^## Bring your own model \(TorchScript\)\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
lines = [l for b in re.findall(r"^```sh\n(.*?)^```", m.group(1) if m else "", re.M | re.S) for l in b.splitlines()
         if "tiny_lm.py" in l]
if len(lines) != 1:
    sys.exit("expected one tiny_lm.py line")
print("set -euo pipefail")
print(lines[0].replace("/var/lib/skytrain", var))
PY
mkdir -p "$var/data"
(cd "$work/repo" && bash -x "$work/tiny-lm.sh") > "$work/tiny-lm.log" 2>&1 ||
  { tail -20 "$work/tiny-lm.log"; fail "docs/models.md's tiny_lm.py line, run as written, failed"; }
[ -f "$var/data/tiny-lm/job.json" ] || { ls -R "$var"; fail "tiny_lm.py wrote no job.json where models.md submits it"; }
PATH=$work/bin:$PATH HOME=$work/home2 XDG_CONFIG_HOME= skytrain validate "$var/data/tiny-lm/job.json" > "$work/tiny-lm-validate.log" 2>&1 ||
  { cat "$work/tiny-lm-validate.log"; fail "the job.json models.md submits is not a valid job spec"; }
echo "ok: docs/models.md's tiny_lm.py line writes the job it submits, and that job validates"
