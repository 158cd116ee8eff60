#!/bin/sh
# The README's test command: install what is missing, build, run every test.
# Usage: tools/test.sh [build-dir] [extra cmake args...]
# GPU tests (ctest label "gpu") skip, and say so, when no GPU is present.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
build=${1:-build}
[ $# -gt 0 ] && shift
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure
# ctest shows skipped tests without their output: say why the GPU tests
# skipped (no GPU, or built without CUDA), when they did
ctest --test-dir "$build" -L gpu -V 2>/dev/null | grep -E "SKIP" | sed 's/^[0-9]*: /note: /' || true
