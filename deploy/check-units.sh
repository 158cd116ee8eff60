#!/bin/sh
# check-units.sh — check the files of deploy/ with systemd's own tools:
#   systemd-analyze verify          both units (the template as instance "cam1")
#   systemd-analyze security        --offline=true, exposure score printed;
#                                   fails above MAX_EXPOSURE
#   systemd-sysusers, systemd-tmpfiles  applied to a scratch root
#   Documentation=                  names a file that cmake --install installs
# ExecStart is pointed at the built binary (verify checks it is executable).
# Usage: deploy/check-units.sh SKYSIEVED_BINARY [OUTPUT_FILE]
# Exit 77 (skipped) when systemd's tools are not installed.
set -eu
bin=${1:?usage: check-units.sh SKYSIEVED_BINARY [OUTPUT_FILE]}
out=${2:-/dev/null}
MAX_EXPOSURE=2.0
here=$(cd "$(dirname "$0")" && pwd)
command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for u in skysieved.service skysieved@.service; do
    sed "s|/usr/local/sbin/skysieved|$bin|" "$here/$u" > "$tmp/$u"
done
cp "$tmp/skysieved@.service" "$tmp/skysieved@cam1.service"

status=0
# Documentation= names a file that cmake --install puts in share/doc/skysieve
for u in skysieved.service skysieved@.service; do
    doc=$(sed -n 's|^Documentation=file:///usr/local/share/doc/skysieve/||p' "$here/$u")
    if [ -n "$doc" ] && grep -q "$doc" "$here/../CMakeLists.txt" &&
        { [ -f "$here/../docs/$doc" ] || [ -f "$here/../$doc" ]; }; then
        echo "documentation $u: $doc"
    else
        echo "documentation $u: FAILED (Documentation= names '$doc', which is not installed)"
        status=1
    fi
done
for u in skysieved.service skysieved@cam1.service; do
    if systemd-analyze verify "$tmp/$u" > "$tmp/verify.log" 2>&1 && [ ! -s "$tmp/verify.log" ]; then
        echo "verify $u: clean"
    else
        echo "verify $u: FAILED"; cat "$tmp/verify.log"; status=1
    fi
done

: > "$out"
for u in skysieved.service skysieved@cam1.service; do
    systemd-analyze security --offline=true --no-pager "$tmp/$u" > "$tmp/sec.log" 2>&1 || true
    score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/sec.log")
    echo "security $u: exposure $score"
    if [ "$out" != /dev/null ]; then
        { echo "== systemd-analyze security --offline=true $u"; cat "$tmp/sec.log"; echo; } >> "$out"
    fi
    if [ -z "$score" ] || awk "BEGIN { exit !($score > $MAX_EXPOSURE) }"; then
        echo "security $u: exposure '$score' above $MAX_EXPOSURE"; status=1
    fi
done

if command -v systemd-sysusers >/dev/null 2>&1 && command -v systemd-tmpfiles >/dev/null 2>&1; then
    mkdir -p "$tmp/root/etc"
    systemd-sysusers --root="$tmp/root" "$here/sysusers.d/skysieve.conf" > /dev/null 2>&1 &&
        grep -q '^skysieve:' "$tmp/root/etc/passwd" && echo "sysusers: user skysieve created" ||
        { echo "sysusers: FAILED"; status=1; }
    systemd-tmpfiles --root="$tmp/root" --create "$here/tmpfiles.d/skysieve.conf" > "$tmp/tmpf.log" 2>&1 &&
        [ -d "$tmp/root/var/spool/skysieve/incoming" ] && echo "tmpfiles: directories created" ||
        { echo "tmpfiles: FAILED"; cat "$tmp/tmpf.log"; status=1; }
fi
exit $status
