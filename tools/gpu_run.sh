#!/bin/bash
# gpu_run.sh — everything the CUDA backend needs checked on a GPU machine,
# in one go: build (CUDA on, sm_90), the GPU tests (ctest -L gpu), the
# parity test under compute-sanitizer (memcheck, racecheck; initcheck and
# synccheck on the stage tests), the benchmark, and a short table at the
# end. Full logs go to $OUT (or ./gpu-out when OUT is unset).
#
# Usage: tools/gpu_run.sh [STEPS] [-- bench args...]
#   STEPS: a comma list of build, test, alltest, sanitize, racechain (racecheck on
#   the whole-chain case, RACECHECK_CHAIN_S seconds, 400 by default), bench, profile,
#   smshare (each kernel's share of the GPU per 512² frame, SMSHARE_SIZE; SMSHARE_ARGS:
#   more bench arguments, e.g. "--share 8"), ab (this tree's bench against AB_OLD's,
#   alternated AB_RUNS times, 2 by default; AB_OLD: a tree exported before the call,
#   e.g. `git archive REV | tar -x -C ab-old`, carried as untracked; each run also runs
#   AB_FEEDS feeds of 512², 8 by default, 0 for none) (default:
#   build,test,sanitize,bench;
#   build is always done first; RACECHECK_CASE_S: seconds per stage case
#   of sanitize's racecheck, 90 by default (240 for guided and calib); RACECHECK_REG_S: the
#   registration case's, 300; RACECHECK_CASES: the parity cases racecheck
#   runs, all by default). Each call of the device tool has 10 minutes: a
#   first call can do build,test,bench and a later one sanitize; the whole
#   sanitize may need two, e.g. RACECHECK_CASES="calib guided" in one and
#   the other cases in the next.
# The GPU host has no packages: run ../shared/tools/gpu-deps-bundle once in
# the checkout (it writes .gpudeps/), carry .gpudeps along; this script
# sources .gpudeps/env.sh when it is there.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
[ -f .gpudeps/env.sh ] && source .gpudeps/env.sh
mode=${1:-all}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
B=build-gpu
JOBS=$(nproc)
S=$OUT/summary.txt
: > "$S"

note() { echo "$*" | tee -a "$S"; }

# step NAME LOGFILE TIMEOUT_S CMD...: run, log, record rc and seconds
step() {
    local name=$1 log=$2 limit=$3
    shift 3
    local t0=$(date +%s)
    timeout "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    note "$(printf '%-28s rc=%-3d %4ds' "$name" "$rc" "$(( $(date +%s) - t0 ))")"
    return $rc
}

device_info() {
    note "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -1)"
    note "nvcc: $(nvcc --version 2>&1 | tail -2 | head -1)"
    note "host: $(nproc) cores, $(uname -r)"
}

do_build() {
    step configure "$OUT/build.log" 120 cmake -S . -B $B -DSKYSIEVE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=RelWithDebInfo || return 1
    step build "$OUT/build.log" 400 cmake --build $B -j"$JOBS" || { tail -30 "$OUT/build.log"; return 1; }
}

do_test() {
    step "ctest -L gpu" "$OUT/ctest.log" 400 ctest --test-dir $B -L gpu --output-on-failure
    grep -E "Checks|tests passed|tests failed|Failed|SKIP|Passed|\*\*\*" "$OUT/ctest.log" | tail -12 | tee -a "$S"
}

# Everything else too, and the daemon's and the live client's suites
# again with the daemon on the CUDA backend (graphs on, the default).
do_alltest() {
    # the INDI test needs indi-bin, which the GPU host does not have; eight
    # tests at once, each with OpenMP's default of a thread per core, spun
    # the cores (check_modelvar ran past its 300 s there): a share each
    SKYSIEVE_INDI_OPTIONAL=1 OMP_NUM_THREADS=$(( JOBS / 8 > 0 ? JOBS / 8 : 1 )) \
        step "ctest (all)" "$OUT/ctest_all.log" 480 ctest --test-dir $B -j8 --output-on-failure
    grep -E "tests passed|tests failed|\*\*\*Failed" "$OUT/ctest_all.log" | tail -8 | tee -a "$S"
    export SKYSIEVE_TEST_BACKEND=cuda
    step "daemon suite on cuda" "$OUT/ctest_daemon_cuda.log" 300 \
        ctest --test-dir $B -R "check_daemon$" --output-on-failure
    unset SKYSIEVE_TEST_BACKEND
    grep -E "tests passed|tests failed|\*\*\*Failed|movers found" "$OUT/ctest_daemon_cuda.log" | tail -8 | tee -a "$S"
}

do_sanitize() {
    local cs="compute-sanitizer --error-exitcode 99 --target-processes all"
    export CK_FORK=no
    step "memcheck parity" "$OUT/memcheck.log" 280 $cs --tool memcheck --leak-check full \
        $B/tests/check_cuda_parity
    # racecheck instruments every shared-memory access: one stage's test
    # case at a time, each with its own time limit
    : > "$OUT/racecheck.log"
    local c
    for c in ${RACECHECK_CASES:-calib registration whiten guided noise matched modelvar detect history chain}; do
        # the chain case runs 24-frame sequences in four modes: minutes
        local lim=${RACECHECK_CASE_S:-90}
        # guided and calib took 171 and 132 s on the H100 (2026-11-26)
        case $c in guided | calib) lim=${RACECHECK_CASE_S:-240} ;; esac
        [ $c = chain ] && lim=${RACECHECK_CHAIN_S:-40}
        [ $c = registration ] && lim=${RACECHECK_REG_S:-300}
        # SKYSIEVE_PARITY_QUICK: the registration case's five frames of
        # nine (the whole case ran past 300 s under racecheck; these took
        # 228 s on the H100, 2026-11-26)
        CK_RUN_CASE=$c SKYSIEVE_PARITY_QUICK=1 step "racecheck $c" "$OUT/racecheck.log" $lim \
            $cs --tool racecheck --racecheck-report hazard $B/tests/check_cuda_parity
    done
    : > "$OUT/initcheck.log"
    for c in calib registration guided modelvar detect history; do
        CK_RUN_CASE=$c step "initcheck $c" "$OUT/initcheck.log" 40 \
            $cs --tool initcheck $B/tests/check_cuda_parity
    done
    for c in calib registration modelvar detect history; do
        CK_RUN_CASE=$c step "synccheck $c" "$OUT/initcheck.log" 40 \
            $cs --tool synccheck $B/tests/check_cuda_parity
    done
    unset CK_FORK
    for f in memcheck racecheck initcheck; do
        note "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Checks:' "$OUT/$f.log" | sort | uniq -c | tr '\n' ' ' | cut -c1-400)"
    done
}

do_profile() {
    # Nsight Compute on the heavy kernels of a 4096² frame (after warm-up);
    # PROFILE_KERNELS (a regex) and PROFILE_COUNT narrow it
    local k=${PROFILE_KERNELS:-"k_boxv|k_whiten|k_fine_sums|k_matched|k_ccl_relabel|k_ccl_local|k_sel_pass|k_store|k_calibrate|k_median3x3|k_hot_hits|k_mad9"}
    step profile "$OUT/profile.log" 200 ncu --target-processes all --kernel-name regex:"$k" \
        --launch-skip "${PROFILE_SKIP:-60}" --launch-count "${PROFILE_COUNT:-24}" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        $B/tools/skysieve-bench --backend cuda --size 4096 --history 20 --frames 1 --warmup 16
    grep -E "^  [a-zA-Z_<].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Stall|Warp Cycles Per Issued" \
        "$OUT/profile.log" | head -150 > "$OUT/profile_short.txt"
}

# What a 512² frame costs the GPU when many feeds share it: every
# kernel's time and SM-cycles (summed over the SMs) over a window of
# steady-state frames, Nsight Compute with caches and clocks as in a run;
# tools/ncu_share.py turns smshare.csv into the per-frame table
do_smshare() {
    local smargs
    read -ra smargs <<< "${SMSHARE_ARGS:-}"
    step smshare "$OUT/smshare.log" 300 ncu --csv --print-units base --cache-control none \
        --clock-control none --launch-skip "${SMSHARE_SKIP:-5000}" --launch-count "${SMSHARE_COUNT:-1200}" \
        --metrics gpu__time_duration.sum,sm__cycles_active.sum,sm__warps_active.sum,sm__cycles_elapsed.avg.per_second,launch__registers_per_thread \
        $B/tools/skysieve-bench --backend cuda --size "${SMSHARE_SIZE:-512}" --history 20 \
        --frames 60 --warmup 44 "${smargs[@]}"
    grep '^"' "$OUT/smshare.log" > "$OUT/smshare.csv"
    python3 tools/ncu_share.py "$OUT/smshare.csv" | tee -a "$S"
}

# The old tree's bench, built beside this one's (started before the build
# step, so that the two compile at once).
ab_build_start() {
    if [ -z "${AB_OLD:-}" ] || [ ! -f "$AB_OLD/CMakeLists.txt" ]; then
        note "ab: AB_OLD is not a tree"
        return 1
    fi
    ( cmake -S "$AB_OLD" -B "$AB_OLD/build-ab" -DSKYSIEVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSKYSIEVE_TESTS=OFF &&
      cmake --build "$AB_OLD/build-ab" -j"$(( JOBS / 2 > 0 ? JOBS / 2 : 1 ))" --target skysieve-bench
    ) > "$OUT/ab_build.log" 2>&1 &
    AB_PID=$!
}

# This tree against AB_OLD, alternated: the bench with the given
# arguments, then (AB_FEEDS > 0) that many feeds of 512²; one line per
# case and run.
do_ab() {
    if [ -z "${AB_PID:-}" ] || ! wait "$AB_PID"; then
        note "ab: the old tree did not build"
        tail -20 "$OUT/ab_build.log" 2>/dev/null
        return 1
    fi
    local feeds=${AB_FEEDS:-8} r t bin
    for r in $(seq 1 "${AB_RUNS:-2}"); do
        for t in new old; do
            bin=$B/tools/skysieve-bench
            [ $t = old ] && bin=$AB_OLD/build-ab/tools/skysieve-bench
            timeout 200 "$bin" "$@" > "$OUT/ab_${t}_$r.log" 2>&1
            note "ab $t run $r $(date -u +%H:%M:%SZ)"
            sed -n '/^back/,/^#/p' "$OUT/ab_${t}_$r.log" | grep -E "^(cuda|cpu) " | cut -c1-200 | tee -a "$S"
            if [ "$feeds" -gt 0 ]; then
                timeout 120 "$bin" --backend cuda --size 512 --history 20 --frames 400 \
                    --feeds "$feeds" 2>&1 | grep "^# feeds" | cut -c1-120 | tee -a "$S"
            fi
        done
    done
}

do_bench() {
    step bench "$OUT/bench.log" 400 $B/tools/skysieve-bench --csv "$OUT/bench.csv" "$@"
    sed -n '/^# device/,/^# measured/p;/^back/,$p' "$OUT/bench.log" | tee -a "$S"
}

device_info
[ "$mode" = all ] && mode=build,test,sanitize,bench
case ",$mode," in *,ab,*) ab_build_start ;; esac
do_build || { echo "build failed"; cat "$S"; exit 1; }
IFS=, read -ra steps <<< "$mode"
for st in "${steps[@]}"; do
    case $st in
    build) ;;
    test) do_test ;;
    alltest) do_alltest ;;
    sanitize) do_sanitize ;;
    bench) do_bench "$@" ;;
    ab) do_ab "$@" ;;
    profile) do_profile ;;
    smshare) do_smshare ;;
    racechain)
        CK_FORK=no CK_RUN_CASE=chain step "racecheck chain" "$OUT/racecheck_chain.log" \
            ${RACECHECK_CHAIN_S:-400} compute-sanitizer --error-exitcode 99 --tool racecheck \
            --racecheck-report hazard $B/tests/check_cuda_parity
        grep -E "RACECHECK SUMMARY|Checks:" "$OUT/racecheck_chain.log" | tee -a "$S" ;;
    *) echo "unknown step $st" >&2; exit 2 ;;
    esac
done
echo "---- summary ($OUT/summary.txt)"
cat "$S"
