#!/bin/sh
# The README's first command: install what is missing, build, and run
# skysieved on its embedded default (the built-in synthetic star-field
# feed "synth0": 1024x1024 u16 at 2 frames/s with movers, streaks, hot
# pixels and cosmic rays), printing the detections as they arrive.
#
# Usage: tools/demo.sh [seconds]     (default: run until Ctrl-C)
# The daemon's log goes to build/demo/skysieved.log; skysieve-sub prints a
# line per frame (warm-up included), one per detection that is not a
# cosmic and one per track report (a mover linked across frames: its id,
# position and velocity). The demo first checks that its own daemon is up
# (a publish port already taken, by another skysieved say, stops it with
# the reason).
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

run=build/demo
mkdir -p "$run"
# The built-in default config, with the control socket moved out of
# /run/skysieve (which only the systemd unit creates) into the demo folder.
build/daemon/skysieved --print-default-config |
    sed "s|ipc:///run/skysieve/control|ipc://$PWD/$run/control|" > "$run/skysieved.json"

build/daemon/skysieved --config "$run/skysieved.json" 2> "$run/skysieved.log" &
daemon=$!
stop() {
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    echo "skysieved stopped; its log: $run/skysieved.log" >&2
}
trap stop EXIT INT TERM
# up and serving: "ready" in its log, or its exit with the reason
i=0
until grep -q " ready: " "$run/skysieved.log" 2>/dev/null; do
    if ! kill -0 "$daemon" 2>/dev/null; then
        echo "skysieved did not start:" >&2
        grep -E " (err|warning) " "$run/skysieved.log" >&2 || tail -5 "$run/skysieved.log" >&2
        exit 1
    fi
    i=$((i + 1))
    [ "$i" -lt 300 ] || { echo "skysieved is not ready after 30 s; see $run/skysieved.log" >&2; exit 1; }
    sleep 0.1
done
echo "skysieved (pid $daemon) runs the synthetic feed: a line per frame, the first ~15 warm up (Ctrl-C ends)..." >&2
if [ $# -gt 0 ]; then
    build/tools/skysieve-sub --endpoint tcp://127.0.0.1:5560 --tracks --timeout "$1" --count 0 &
    sub=$!
    sleep "$1"
    kill -INT "$sub" 2>/dev/null || true
    wait "$sub" 2>/dev/null || true
else
    build/tools/skysieve-sub --endpoint tcp://127.0.0.1:5560 --tracks
fi
