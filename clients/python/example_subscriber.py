#!/usr/bin/python3
"""Example: watch a skysieved publisher from Python.

Prints every detection as one JSON line on stdout (the message's feed, seq
and time added), a one-line summary of every residual on stderr (and, with
--tracks, of every track report), and can save the residuals as .npy files
(or FITS files when astropy is present).

    /usr/bin/python3 clients/python/example_subscriber.py tcp://127.0.0.1:5560 \
        --feed cam1 --count 100 --save-residuals /tmp/res

Needs pyzmq and numpy (Debian: python3-zmq, python3-numpy).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import skysieve_client as sc  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("endpoint", help="skysieved's PUB endpoint, e.g. tcp://127.0.0.1:5560")
    ap.add_argument("--feed", help="only this feed (exact match)")
    ap.add_argument("--status", action="store_true", help="also print status messages")
    ap.add_argument("--tracks", action="store_true",
                    help="also print a line per track report (tracks.<feed> messages)")
    ap.add_argument("--count", type=int, default=0, help="stop after N messages (0: never)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="exit with status 3 when nothing arrives for this many seconds")
    ap.add_argument("--save-residuals", metavar="DIR",
                    help="write each residual to DIR as <feed>-<seq>-<time>.fits (astropy) "
                         "or .npy: skysieved's naming rule, never over a file")
    args = ap.parse_args(argv)

    topics = ["detections."]
    if args.save_residuals:
        os.makedirs(args.save_residuals, exist_ok=True)
        topics.append("residual.")
    if args.tracks:
        topics.append("tracks.")
    if args.status:
        topics.append("status")
    n = 0
    with sc.Subscriber(args.endpoint, topics=topics, feed=args.feed) as sub:
        while not args.count or n < args.count:
            try:
                m = sub.recv(timeout=args.timeout)
            except sc.ProtocolError as e:
                print("skipped a malformed message: %s (%s)" % (e.text, e.reason), file=sys.stderr)
                continue
            if m is None:
                print("nothing for %g s" % args.timeout, file=sys.stderr)
                return 3
            n += 1
            if m.type == "detections":
                for d in m.detections:
                    line = dict(feed=m.feed, seq=m.seq, time=m.time, mjd=m.mjd, **d)
                    print(json.dumps(line), flush=True)
            elif m.type == "residual":
                px = m.pixels                       # float32 view of the message, no copy
                valid = np.isfinite(px)
                print("residual %s #%d %dx%d status=%s sigma=%.3g valid=%.1f%% shift=%s"
                      % (m.feed, m.seq, m.width, m.height, m.status, m.sigma,
                         100.0 * valid.mean(), m.shift), file=sys.stderr)
                try:
                    m.to_fits(sc.free_residual_file_name(args.save_residuals, m.feed, m.seq,
                                                         m.time, ".fits"))
                except ImportError:
                    np.save(sc.free_residual_file_name(args.save_residuals, m.feed, m.seq, m.time,
                                                       ".npy"), px)
            elif m.type == "tracks":
                for t in m.tracks:
                    v = t["velocity"]
                    print("track %s #%d: %d %s %s n=%d at (%.2f, %.2f) v (%+.4g, %+.4g) %s"
                          % (m.feed, m.seq, t["id"], t["kind"], t["state"], t["n"],
                             t["position"]["x"], t["position"]["y"], v["x"], v["y"], v["unit"]),
                          file=sys.stderr)
            elif m.type == "status":
                print(json.dumps({"status": m.header}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
