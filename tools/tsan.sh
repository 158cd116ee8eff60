#!/bin/sh
# The ThreadSanitizer run of issue 11: the daemon (skysieved) and the
# queue and daemon tests built with -fsanitize=thread (OpenMP off) and run
# with tests/tsan.supp, which suppresses only races inside libzmq and
# libsodium (their hand-overs are invisible to TSan: the file says why).
# Any other report fails the run (exit code 66 of the reporting process).
#
# Usage: tools/tsan.sh [BUILD_DIR]     (default build-tsan)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
mkdir -p "$build"
log=$build/tsan-build.log
echo "building the TSan tests in $build (log: $log)"
if ! { cmake -S . -B "$build" -DSKYSIEVE_TSAN=ON -DSKYSIEVE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$build" -j"$(nproc)" --target skysieved check_daemon check_daemon_queue
     } > "$log" 2>&1; then
    tail -30 "$log"
    echo "tsan.sh: the build failed (the whole log: $log)" >&2
    exit 1
fi
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 exitcode=66 second_deadlock_stack=1"
export SKYSIEVE_SOURCE_DIR=$PWD SKYSIEVE_BINARY_DIR=$PWD/$build
status=0
for t in check_daemon_queue check_daemon; do
    if "$build/tests/$t" > "$build/$t.tsan.log" 2>&1; then
        echo "tsan $t: $(grep -m1 'Checks' "$build/$t.tsan.log")"
    else
        echo "tsan $t: FAILED"
        grep -m20 -E "WARNING: ThreadSanitizer|SUMMARY|:[EF]:" "$build/$t.tsan.log" || tail -20 "$build/$t.tsan.log"
        status=1
    fi
done
exit $status
