#!/bin/sh
# Build the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) and run
# each for SECONDS from its seed corpus. A crash, leak, timeout or
# out-of-memory fails the run; the input that caused it is kept as
# OUT/crash-<target>-* — copy it into tests/fuzz/regress/<target>/, where
# every build runs it (ctest fuzz_<target>_corpus), and fix the cause.
#
# Usage: tools/fuzz.sh [BUILD_DIR] [SECONDS] [TARGET...]
#   BUILD_DIR  the fuzzing build (default build-fuzz); configured here
#   SECONDS    per target (default 60)
#   TARGET     frame results control config fits indi (default: all)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
secs=${2:-60}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
targets=${*:-frame results control config fits indi}
command -v clang >/dev/null 2>&1 || { echo "fuzz.sh: clang is not installed (tools/install-deps.sh)" >&2; exit 2; }
mkdir -p "$build"
log=$build/fuzz-build.log
echo "building the fuzz targets in $build (log: $log)"
if ! { CC=clang cmake -S . -B "$build" -DSKYSIEVE_FUZZ=ON -DSKYSIEVE_CUDA=OFF \
           -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       for t in $targets; do cmake --build "$build" -j"$(nproc)" --target "fuzz_$t" || exit 1; done
     } > "$log" 2>&1; then
    tail -30 "$log"
    echo "fuzz.sh: the build failed (the whole log: $log)" >&2
    exit 1
fi
out=$build/fuzz-out
mkdir -p "$out"
status=0
for t in $targets; do
    work=$out/corpus-$t
    mkdir -p "$work"
    seeds=tests/fuzz/corpus/$t
    extra=""
    [ -d tests/fuzz/regress/$t ] && extra=tests/fuzz/regress/$t
    if "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/crash-$t-" \
        "$work" "$seeds" $extra > "$out/$t.log" 2>&1; then
        echo "fuzz $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" |
                         grep -o '[0-9]*$') runs in ${secs} s, no crash"
    else
        echo "fuzz $t: FAILED — $(ls "$out"/crash-"$t"-* 2>/dev/null | head -1)"
        grep -m5 -E "ERROR|SUMMARY" "$out/$t.log" || tail -5 "$out/$t.log"
        status=1
    fi
done
exit $status
