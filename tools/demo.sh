#!/bin/sh
# The README's first command: install what is missing, build, and run
# skysieved on its embedded default (the built-in synthetic star-field
# feed "synth0": 1024x1024 u16 at 2 frames/s with movers, streaks, hot
# pixels and cosmic rays), printing the detections as they arrive.
#
# Usage: tools/demo.sh [seconds]     (default: run until Ctrl-C)
# The daemon's log goes to build/demo/skysieved.log; detections (one JSON
# line each, from skysieve-sub) go to the terminal.
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
echo "skysieved (pid $daemon) runs the synthetic feed; detections follow (Ctrl-C ends)..." >&2
if [ $# -gt 0 ]; then
    build/tools/skysieve-sub --endpoint tcp://127.0.0.1:5560 --timeout "$1" --count 0 &
    sub=$!
    sleep "$1"
    kill -INT "$sub" 2>/dev/null || true
    wait "$sub" 2>/dev/null || true
else
    build/tools/skysieve-sub --endpoint tcp://127.0.0.1:5560
fi
