#!/usr/bin/env bash
# The Debian package, as an operator gets it: `cpack -G DEB` in the build tree, then
# `apt-get install ./skytrain_<version>_<arch>.deb` on this machine. Checks both binaries
# run from /usr/bin, the package's files (and nothing of the tests), the conffile, the system
# user and the state dir made by postinst, the installed unit (ExecStart, Restart, watchdog,
# systemd-analyze verify), and that purging removes the files again. Needs root or
# passwordless sudo (else skipped, exit 77); skipped too where a skytrain package is already
# installed, which the test would replace and remove.
set -euo pipefail
# Under pipefail, `producer | grep -q` fails when grep quits at its first match and the producer
# then writes into the closed pipe (SIGPIPE): so long outputs are matched from a here-string.
build=$1 version=$2
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2> /dev/null || skip "needs root or passwordless sudo to install a package"
  sudo_cmd=(sudo -n)
fi
as_root() { "${sudo_cmd[@]}" "$@"; }
if dpkg-query -W -f='${Status}' skytrain 2> /dev/null | grep -q "ok installed"; then
  skip "a skytrain package is installed on this machine; the test would replace and remove it"
fi

out=$build/deb-test
rm -rf "$out"
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$out" > "$out.log" 2>&1 || { cat "$out.log"; fail "cpack"; }
arch=$(dpkg --print-architecture)
deb=$out/skytrain_${version}_${arch}.deb
[ -f "$deb" ] || { ls "$out"; fail "cpack made no $(basename "$deb")"; }
echo "ok: $(basename "$deb"), $(du -h "$deb" | cut -f1)"
dpkg-deb --field "$deb" Depends | grep -q "libtorch" || fail "Depends has no LibTorch (dpkg-shlibdeps): $(dpkg-deb --field "$deb" Depends)"

# What existed before, so that cleaning up removes only what the test made.
had_user=0 had_state=0
getent passwd skytrain > /dev/null && had_user=1
[ -e /var/lib/skytrain ] && had_state=1
cleanup() {
  as_root apt-get purge -y -q skytrain > /dev/null 2>&1 || true
  if [ $had_user = 0 ]; then
    as_root userdel skytrain 2> /dev/null || true
    as_root groupdel skytrain 2> /dev/null || true
  fi
  [ $had_state = 1 ] || as_root rm -rf /var/lib/skytrain
}
trap cleanup EXIT
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" > "$out/apt.log" 2>&1 ||
  { cat "$out/apt.log"; fail "apt-get install ./$(basename "$deb")"; }
echo "ok: installed"

# Both binaries, from /usr/bin, with the package's version.
[ "$(/usr/bin/skytraind --version)" = "skytraind $version" ] || fail "skytraind --version: '$(/usr/bin/skytraind --version 2>&1)'"
/usr/bin/skytrain --version | grep -qF "$version" || fail "skytrain --version: '$(/usr/bin/skytrain --version 2>&1)'"
/usr/bin/skytrain --help > /dev/null || fail "skytrain --help"
echo "ok: skytraind --version: $(/usr/bin/skytraind --version)"

# The files: the binaries (the daemon's sentinel beside it), the shim where the daemon looks for it, systemd's three files,
# the config, the README, docs, examples, man pages and completion; no other executable (tests, benchmarks, the WAN relay).
unit=/usr/lib/systemd/system/skytraind.service
files=$(dpkg -L skytrain)
for f in /usr/bin/skytraind /usr/bin/skytraind-sentinel /usr/bin/skytrain /usr/lib/skytrain/libskytrain_sentencepiece.so "$unit" \
         /usr/lib/sysusers.d/skytrain.conf /usr/lib/tmpfiles.d/skytrain.conf /etc/skytrain/skytraind.json \
         /usr/share/doc/skytrain/README.md /usr/share/doc/skytrain/copyright /usr/share/doc/skytrain/changelog.Debian.gz \
         /usr/share/doc/skytrain/docs/quickstart.md /usr/share/doc/skytrain/examples/gpt-web.json \
         /usr/share/doc/skytrain/examples/torchscript/tiny_lm.py \
         /usr/share/man/man1/skytrain.1.gz /usr/share/man/man1/skytraind.1.gz /usr/share/bash-completion/completions/skytrain; do
  grep -qxF "$f" <<< "$files" || fail "the package has no $f"
  [ -f "$f" ] || fail "$f is not installed"
done
elf=/usr/bin/skytraind$'\n'/usr/bin/skytraind-sentinel$'\n'/usr/bin/skytrain$'\n'/usr/lib/skytrain/libskytrain_sentencepiece.so
for f in $files; do
  if [ -f "$f" ] && file -b "$f" | grep -q "^ELF"; then
    grep -qxF "$f" <<< "$elf" || fail "the package has an unexpected binary: $f"
    if ldd "$f" | grep -q "not found"; then ldd "$f"; fail "$f has unresolved libraries"; fi
  fi
done
echo "ok: $(echo "$files" | wc -l) paths; ELF files: the two binaries and the shim"
# The man page reads as one (every subcommand in it), the completion completes.
grep -q '^\.SH "SKYTRAIN AUTHORIZE"' <<< "$(zcat /usr/share/man/man1/skytrain.1.gz)" || fail "the man page lacks skytrain authorize"
completed=$(bash -c 'source /usr/share/bash-completion/completions/skytrain; COMP_WORDS=(skytrain sub); COMP_CWORD=1; _skytrain; echo "${COMPREPLY[*]}"')
[ "$completed" = submit ] || fail "bash completion of \"skytrain sub\" gave \"$completed\""
echo "ok: man pages, bash completion, copyright, changelog, docs and examples"

# The config is a conffile; postinst made the user and the state dir.
dpkg-query -W -f='${Conffiles}\n' skytrain | grep -q "^ */etc/skytrain/skytraind.json " ||
  fail "/etc/skytrain/skytraind.json is not a conffile: $(dpkg-query -W -f='${Conffiles}' skytrain)"
getent passwd skytrain > /dev/null || fail "no user skytrain"
[ "$(stat -c '%U:%G %a' /var/lib/skytrain)" = "skytrain:skytrain 750" ] ||
  fail "/var/lib/skytrain is $(stat -c '%U:%G %a' /var/lib/skytrain), not skytrain:skytrain 750"
echo "ok: conffile, user $(getent passwd skytrain | cut -d: -f1,3,6,7), state dir"

# The unit: the packaged binary, the static user, restarts and the watchdog; and systemd
# accepts it (verify prints warnings without failing: any about our unit is a failure).
for line in '^ExecStart=/usr/bin/skytraind --config /etc/skytrain/skytraind.json$' '^Type=notify$' \
            '^Restart=on-failure$' '^WatchdogSec=' '^User=skytrain$' '^DynamicUser=no$' \
            '^Documentation=file:///usr/share/doc/skytrain/README.md$'; do
  grep -q "$line" "$unit" || fail "$unit has no line matching $line"
done
verify=$(systemd-analyze verify "$unit" 2>&1) || { echo "$verify"; fail "systemd-analyze verify $unit"; }
if grep -q "skytraind.service" <<< "$verify"; then echo "$verify"; fail "systemd-analyze verify warns about the unit"; fi
echo "ok: $unit verified"

as_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q skytrain > "$out/apt.log" 2>&1 ||
  { cat "$out/apt.log"; fail "apt-get purge skytrain"; }
for f in /usr/bin/skytraind "$unit" /etc/skytrain/skytraind.json; do
  [ ! -e "$f" ] || fail "$f is still there after purge"
done
echo "ok: purged"
