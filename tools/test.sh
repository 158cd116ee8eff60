#!/bin/sh
# The README's test command: install what is missing, build, run every test.
# Usage: tools/test.sh [build-dir] [extra cmake args...]
# Quiet apart from the test results: the configure and build output goes to
# <build-dir>/test-build.log (its end is shown when they fail). Every test
# that skipped says why at the end (GPU tests without a GPU, say).
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
build=${1:-build}
[ $# -gt 0 ] && shift
mkdir -p "$build"
log=$build/test-build.log
echo "building in $build (log: $log)"
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
       cmake --build "$build" -j"$(nproc)"; } > "$log" 2>&1; then
    tail -40 "$log"
    echo "test.sh: the build failed (the whole log: $log)" >&2
    exit 1
fi
status=0
ctest --test-dir "$build" --output-on-failure > "$build/ctest.log" 2>&1 || status=$?
grep -vE "^ +Start +[0-9]+:|^Test project" "$build/ctest.log"
# ctest shows a skipped test without its output: say why each one skipped
for t in $(sed -n 's/^.*Test *#[0-9]*: \([A-Za-z0-9_]*\) .*\*\*\*Skipped.*$/\1/p' "$build/ctest.log"); do
    why=$(ctest --test-dir "$build" -R "^$t\$" -V 2>/dev/null | grep -m1 -iE "skip" |
          sed 's/^[0-9]*: //')
    echo "note: $t skipped: ${why:-no reason printed}"
done
exit "$status"
