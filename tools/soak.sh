#!/bin/sh
# Soak: run skysieved on its synthetic feed for SECONDS at RATE frames/s
# with a subscriber reading, sample its RSS and open files every 5 s, stop
# it with SIGTERM and check that every frame is accounted for (received =
# accepted + rejected, accepted = processed + dropped) and that neither
# RSS nor the open files kept growing after the first minute (at most 10 %
# and 8 fds above their level at 60 s, or at a quarter of a shorter run).
#
# Usage: tools/soak.sh BUILD_DIR [SECONDS] [RATE] [SIZE] [BACKEND]
#   defaults: 120 s, 20 frames/s, 512x512, cpu (cuda on a GPU machine)
# Prints a line per sample and a summary; exit 0 when the checks hold.
set -eu
build=${1:?usage: tools/soak.sh BUILD_DIR [SECONDS] [RATE] [SIZE] [BACKEND]}
secs=${2:-120}
rate=${3:-20}
size=${4:-512x512}
backend=${5:-cpu}
w=${size%x*}
h=${size#*x}
d=$(mktemp -d /tmp/skysieve-soak.XXXXXX)
trap 'kill "$pid" 2>/dev/null || true; kill "$sub" 2>/dev/null || true; rm -rf "$d"' EXIT
cat > "$d/soak.json" <<JSON
{ "log_level": "notice", "control": {"endpoint": "ipc://$d/ctl"},
  "publish": {"endpoint": "ipc://$d/pub"}, "status_interval": 1,
  "feeds": [ { "name": "soak", "source": {"type": "synth",
      "synth": {"rate": $rate, "width": $w, "height": $h}},
    "limits": {"max_width": $w, "max_height": $h},
    "pipeline": {"backend": "$backend"} } ] }
JSON
"$build/daemon/skysieved" --config "$d/soak.json" > "$d/log" 2>&1 &
pid=$!
"$build/tools/skysieve-sub" -e "ipc://$d/pub" --json -q > /dev/null 2>&1 &
sub=$!
echo "soak: $secs s, $rate frames/s of $size, backend $backend, skysieved pid $pid ($(date -u +%FT%TZ))"
ref_at=60
[ "$secs" -lt 240 ] && ref_at=$((secs / 4))
t=0 rss_ref="" fd_ref="" rss_max=0 fd_max=0
while [ "$t" -lt "$secs" ]; do
    sleep 5
    t=$((t + 5))
    kill -0 "$pid" 2>/dev/null || { echo "soak: skysieved died"; tail -20 "$d/log"; exit 1; }
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" | wc -l)
    [ "$rss" -gt "$rss_max" ] && rss_max=$rss
    [ "$fds" -gt "$fd_max" ] && fd_max=$fds
    if [ -z "$rss_ref" ] && [ "$t" -ge "$ref_at" ]; then rss_ref=$rss; fd_ref=$fds; fi
    echo "t=${t}s rss=${rss}KiB fds=$fds"
done
kill -TERM "$pid"
wait "$pid" && rc=0 || rc=$?
line=$(grep "feed soak final:" "$d/log" | tail -1)
val() { echo "$line" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }
received=$(val received) accepted=$(val accepted) rejected=$(val rejected)
dropped=$(val dropped) processed=$(val processed)
echo "soak: exit $rc; received $received accepted $accepted rejected $rejected dropped $dropped processed $processed"
echo "soak: RSS ${rss_ref}KiB at ${ref_at}s, ${rss}KiB at the end, ${rss_max}KiB at most; open files $fd_ref at ${ref_at}s, $fds at the end, $fd_max at most"
ok=1
[ "$rc" -eq 0 ] || { echo "soak: FAILED: exit status $rc"; ok=0; }
[ "$received" -eq $((accepted + rejected)) ] && [ "$accepted" -eq $((processed + dropped)) ] ||
    { echo "soak: FAILED: frames not accounted for"; ok=0; }
[ "$processed" -gt 0 ] || { echo "soak: FAILED: nothing processed"; ok=0; }
[ "$rss_max" -le $((rss_ref + rss_ref / 10)) ] || { echo "soak: FAILED: RSS grew more than 10 %"; ok=0; }
[ "$fd_max" -le $((fd_ref + 8)) ] || { echo "soak: FAILED: open files grew"; ok=0; }
[ "$ok" -eq 1 ] && echo "soak: OK"
[ "$ok" -eq 1 ]
