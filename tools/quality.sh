#!/bin/sh
# The quality run of docs/QUALITY.md: six synthetic scenarios of what real
# stations see, each generated with skysieve-synth and scored with
# skysieve-eval (pipeline defaults, CPU backend), then two summary tables
# against the targets (detection, tracks).
#
# Usage: tools/quality.sh BUILD_DIR OUT_DIR [FRAMES]
#   BUILD_DIR  a build tree with tools/skysieve-synth and tools/skysieve-eval
#   OUT_DIR    where the sequences (about 2.1 MB per frame), the eval tables
#              (sN.txt) and JSON (sN.json) go; created if missing
#   FRAMES     frames per scenario, at least 60 (default 60)
# Environment: EVAL_ARGS adds options to every skysieve-eval run (e.g.
# "--backend cuda", or "--set pipeline.history=30").
#
# The scenarios (1024x1024 u16; 40 movers, five at each SNR of the list, so
# that every SNR bin gets >= 100 samples over the ok frames of a 60-frame
# run; "usual" = the daemon's built-in synthetic feed: 2000 stars, sky 1000
# with a gradient of 0.05 ADU/px, bias 100, 3 % seeing wobble, 2 %
# transparency, 50 hot pixels, 5 cosmic rays per Mpix):
#   1 calm      usual, 1 px jitter, a few streaks
#   2 jitter    usual, 10 px rms jitter, drift (0.5, 0.3) px/frame, a 40 px
#               jump at frame FRAMES/2
#   3 sky       usual, 1 px jitter, 5 % sky level and 5 % transparency noise,
#               10 % seeing wobble, a stray-light glow of 100 ADU
#   4 static    no jitter, sky 20 + uniform integer noise 0..9 (the INDI
#               simulator), PSF sigma 0.68 (FWHM 1.6 px), stars on pixel
#               centres
#   5 space     50 cosmic rays per Mpix, 200 hot pixels, 32 overscan columns,
#               frame height 1024 - U{0..9}, 0.3 px jitter; the movers are
#               slow comets (0.5 px/frame, sigma 2 px)
#   6 tracks    calm, the movers at 0.2 .. 300 px/frame (a speed list that
#               mixes with the SNR list), 4 crossing pairs (8 more movers)
#               that meet at frame FRAMES/2 at 22.5, 67.5, 112.5 and 157.5
#               degrees; a wrapped mover re-appears at a random place
#               (--wrap-scatter: no aliasing of the fast ones' wraps); the
#               exposure equals the interval, so movers of 10 px/frame and up
#               are trails as long as their step (skysieve-synth trails a
#               mover whose path in the exposure exceeds sqrt(12) sigma)
set -eu

if [ $# -lt 2 ]; then
    sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
build=$1
out=$2
frames=${3:-60}
synth=$build/tools/skysieve-synth
evalx=$build/tools/skysieve-eval
for x in "$synth" "$evalx"; do
    [ -x "$x" ] || { echo "quality.sh: $x not built" >&2; exit 2; }
done
[ "$frames" -ge 60 ] 2>/dev/null || { echo "quality.sh: FRAMES must be a number >= 60" >&2; exit 2; }
mkdir -p "$out"

SNRS=4,5,6,7,8,10,15,20
SPEEDS=0.2,0.5,1,3,10,30,100,300
# The generator's settings before each scenario's own, spelled out: the
# scenarios were defined on them, and skysieve-synth's defaults (those of
# the daemon's synthetic feed) differ. A fixed start time: with the
# clock's, the frames' MJD stamps round differently from run to run and the
# JSON's velocity figures with them.
BASE="--start-mjd 61000 --interval 1 --exposure 1 --flux-min 300 --moffat-beta 2.5 --seeing-wobble 0 --sky-grad 0,0 --bias 0 --hot 0 --hot-level 2000 --cosmic-rate 0 --jump-px 20 --transparency 0 --mover-speed 2 --streak-prob 0 --streak-len 50,300"
COMMON="--quiet --size 1024x1024 --frames $frames $BASE --movers 40 --mover-snr-list $SNRS"
USUAL="--stars 2000 --sky 1000 --sky-grad 0.05,0 --bias 100 --seeing-wobble 0.03 --transparency 0.02 --hot 50 --cosmic-rate 5"
STREAKS="--streak-prob 0.1 --streak-len 40,200"

S1="$USUAL $STREAKS --jitter 1 --seed 101"
S2="$USUAL $STREAKS --jitter 10 --drift 0.5,0.3 --jump-at $((frames / 2)) --jump-px 40 --seed 102"
S3="$USUAL $STREAKS --jitter 1 --sky-var 0.05 --transparency 0.05 --seeing-wobble 0.10 --stray 100 --seed 103"
S4="--stars 2000 --jitter 0 --sky 20 --noise uniform --uniform-max 9 --psf-sigma 0.68 --star-snap --hot 50 --cosmic-rate 5 $STREAKS --seed 104"
S5="--stars 2000 --sky 1000 --sky-grad 0.05,0 --bias 100 --jitter 0.3 --cosmic-rate 50 --hot 200 --overscan 32 --height-jitter 9 --mover-speed 0.5 --mover-sigma 2 --streak-prob 0.05 --streak-len 40,200 --seed 105"
S6="$USUAL $STREAKS --jitter 1 --mover-speed-list $SPEEDS --crossing 4 --wrap-scatter --seed 106"

# Per-scenario eval options (the pipeline defaults otherwise): scenario 4's
# matched filter at the PSF's 0.68 px, scenario 5's overscan by rows.
E1=""
E2=""
E3=""
E4="--set pipeline.psf_sigma=0.68"
E5="--set pipeline.overscan=row"
E6=""

names="calm jitter sky static space tracks"
echo "skysieve quality run, $(date -u '+%Y-%m-%d %H:%MZ'), $frames frames per scenario"
if command -v git >/dev/null 2>&1 && git -C "$(dirname "$0")" rev-parse --short HEAD >/dev/null 2>&1; then
    echo "tree: $(git -C "$(dirname "$0")" rev-parse --short HEAD)$(git -C "$(dirname "$0")" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
fi
i=0
for name in $names; do
    i=$((i + 1))
    eval "gen=\$S$i; extra=\$E$i"
    dir=$out/s$i-$name
    rm -rf "$dir"
    echo
    echo "=== scenario $i: $name"
    echo "\$ $synth $COMMON --out $dir $gen"
    # shellcheck disable=SC2086  # the option strings are meant to split
    "$synth" $COMMON --out "$dir" $gen
    echo "\$ $evalx --quiet --truth $dir/truth.jsonl --json-out $out/s$i.json $extra ${EVAL_ARGS:-} $dir"
    set +e
    # shellcheck disable=SC2086
    "$evalx" --quiet --truth "$dir/truth.jsonl" --json-out "$out/s$i.json" $extra ${EVAL_ARGS:-} "$dir" |
        tee "$out/s$i.txt"
    set -e
done

command -v python3 >/dev/null 2>&1 || { echo "(python3 missing: no summary table)"; exit 0; }
echo
python3 - "$out" $names <<'EOF'
import json, math, sys
out, names = sys.argv[1], sys.argv[2:]
def f(v, fmt):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt % v
def comp(s, snr):
    i = s["snr_bins"].index(snr)
    return s["pipeline"]["completeness"][i]
print("summary (targets: complete >= 0.90 at SNR 7 and >= 0.99 at 10, non-cosmic false alarms")
print("<= 0.5 per Mpix-frame, ok after warm-up >= 0.95, shift error ratio within 1.5)")
print("%-10s %6s %8s %6s %6s %6s %6s %9s %9s %9s" % ("scenario", "ok", "shiftRMS", "ratio",
      "c@7", "c@10", "c@20", "FA pipe", "FA diff", "FA median"))
for i, n in enumerate(names, 1):
    try:
        s = json.load(open("%s/s%d.json" % (out, i)))
    except (OSError, ValueError):
        print("%-10s (no result)" % n)
        continue
    fa = lambda m: s[m]["false_alarms_non_cosmic"] if m in s else None
    print("%-10s %6s %8s %6s %6s %6s %6s %9s %9s %9s" % (n,
          f(s["frames"]["ok_after_warmup"], "%.3f"), f(s["shift"]["rms"], "%.4f"),
          f(s["shift"]["ratio"], "%.2f"), f(comp(s, 7), "%.3f"), f(comp(s, 10), "%.3f"),
          f(comp(s, 20), "%.3f"), f(fa("pipeline"), "%.3f"), f(fa("diff"), "%.2f"),
          f(fa("median"), "%.2f")))
print()
print("tracks (targets: >= 0.95 of the mover segments at SNR >= 7 in one track each, <= 1 false")
print("track per 100 Mpix-frames; segments: the branches of a mover's path between wraps with")
print(">= 3 found detections; velocity error of the pure tracks, px/frame)")
print("%-10s %5s %6s %7s %8s %6s %6s %7s %7s" % ("scenario", "segs", "in-one", "@SNR>=7",
      "crossing", "purity", "tracks", "FT/100M", "v RMS"))
for i, n in enumerate(names, 1):
    try:
        t = json.load(open("%s/s%d.json" % (out, i)))["tracks"]
    except (OSError, ValueError, KeyError):
        print("%-10s (no result)" % n)
        continue
    print("%-10s %5d %6s %7s %8s %6s %6d %7s %7s" % (n, t["segments"],
          f(t["completeness"], "%.3f"), f(t["completeness_snr7"], "%.3f"),
          f(t["completeness_crossing"], "%.3f"), f(t["purity"], "%.3f"), t["tracks"],
          f(t["false_per_100_mpix_frames"], "%.2f"), f(t["velocity_rms"], "%.4f")))
EOF
