#!/usr/bin/env python3
"""ncu_share.py — each kernel's cost per frame from an Nsight Compute CSV
(tools/gpu_run.sh smshare): GPU time (the kernel alone, µs) and its share
of the whole GPU (SM-cycles summed over the SMs, over the SM count and the
clock: the µs the kernel would hold every SM), per frame. The window is
cut to whole frames: from a kernel's first launch to its last, where that
kernel runs once per frame (the marker, default k_calibrate).

Usage: ncu_share.py smshare.csv [marker] [sm_count]
"""
import csv
import sys
from collections import defaultdict


def launches(path):
    """Yields (id, kernel, {metric: value}) in launch order."""
    rows = defaultdict(dict)
    names = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            i = int(r["ID"])
            name = r["Kernel Name"]
            for anon in ("(anonymous namespace)::", "<unnamed>::"):
                name = name.replace(anon, "")
            # "void k_store<unsigned short>(const ...)" -> "k_store"
            names[i] = name.split("(")[0].split("<")[0].split()[-1].split("::")[-1]
            try:
                rows[i][r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
            except ValueError:
                pass
    for i in sorted(rows):
        yield i, names[i], rows[i]


def main():
    path = sys.argv[1]
    marker = sys.argv[2] if len(sys.argv) > 2 else "k_calibrate"
    sms = int(sys.argv[3]) if len(sys.argv) > 3 else 132
    ks = list(launches(path))
    at = [n for n, (_, name, _) in enumerate(ks) if name == marker]
    if len(at) < 2:
        sys.exit(f"ncu_share: fewer than two launches of {marker} in {path}")
    window = ks[at[0]:at[-1]]
    frames = len(at) - 1
    t = defaultdict(float)
    share = defaultdict(float)
    count = defaultdict(int)
    regs = {}
    for _, name, m in window:
        clock = m.get("sm__cycles_elapsed.avg.per_second", 0.0)
        t[name] += m.get("gpu__time_duration.sum", 0.0) / 1e3
        if clock > 0:
            share[name] += m.get("sm__cycles_active.sum", 0.0) / sms / clock * 1e6
        count[name] += 1
        regs[name] = int(m.get("launch__registers_per_thread", 0))
    print(f"# {frames} frames, {len(window) / frames:.1f} launches a frame; "
          f"µs per frame: the kernel's time, and its whole-GPU share (SM-cycles / {sms} SMs / clock)")
    print(f"{'kernel':<24} {'launches':>8} {'regs':>4} {'time µs':>8} {'GPU-share µs':>12}")
    for name in sorted(share, key=lambda k: -share[k]):
        print(f"{name:<24} {count[name] / frames:8.1f} {regs[name]:4d} "
              f"{t[name] / frames:8.1f} {share[name] / frames:12.1f}")
    print(f"{'all':<24} {len(window) / frames:8.1f} {'':>4} "
          f"{sum(t.values()) / frames:8.1f} {sum(share.values()) / frames:12.1f}")


if __name__ == "__main__":
    main()
