#!/usr/bin/python3
"""Live test of the Python client against a running skysieved.

Starts the built daemon ($SKYSIEVE_BINARY_DIR/daemon/skysieved) on ipc://
endpoints in a temporary directory, then, with skysieve_client only:
 - Subscriber: waits for a status message, then receives a detections
   message for every frame sent and a residual (numpy float32, a read-only
   view of the received buffer) for every frame with status "ok", and the
   tracks messages;
 - Sender: streams a star field rendered here with numpy (jitter, noise,
   two movers);
 - the movers are found near where they were drawn, and tracked: a track
   each, at their position with their velocity (px/s), whose id their
   detections carry;
 - control(): status, stats (the counters add up), config, reset, and an
   error response for an unknown feed;
 - SIGTERM: the daemon drains and exits 0.

Run by ctest with Debian's /usr/bin/python3 (python3-zmq, python3-numpy);
exits 77 (skipped) without those modules or without the built daemon.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import numpy as np
    import zmq
except ImportError as e:  # pragma: no cover
    print("skipping: %s (needs python3-zmq and python3-numpy)" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import skysieve_client as sc  # noqa: E402

BINARY = os.path.join(os.environ.get("SKYSIEVE_BINARY_DIR", ""), "daemon", "skysieved")
if not os.access(BINARY, os.X_OK):
    print("skipping: %s is not built (set SKYSIEVE_BINARY_DIR)" % BINARY)
    sys.exit(77)
W = H = 256
FRAMES = 22
PSF = 1.4
MATCH_PX = 2.0


def render(rng, stars, movers, shift):
    """One u16 frame: Gaussian stars at sky position p drawn at p - shift,
    sky 1000 ADU, Gaussian noise of Poisson size, movers as given (frame
    coordinates)."""
    img = np.full((H, W), 1000.0)
    yy, xx = np.mgrid[0:H, 0:W]
    objs = [(x - shift[0], y - shift[1], f) for x, y, f in stars] + list(movers)
    for x, y, f in objs:
        x0, x1 = max(int(x) - 7, 0), min(int(x) + 8, W)
        y0, y1 = max(int(y) - 7, 0), min(int(y) + 8, H)
        if x0 >= x1 or y0 >= y1:
            continue
        g = np.exp(-((xx[y0:y1, x0:x1] - x) ** 2 + (yy[y0:y1, x0:x1] - y) ** 2) / (2 * PSF ** 2))
        img[y0:y1, x0:x1] += f / (2 * np.pi * PSF ** 2) * g
    img += rng.normal(0.0, 1.0, img.shape) * np.sqrt(img + 25.0)
    return np.clip(np.rint(img + 100.0), 0, 65535).astype(np.uint16)


class LiveDaemon(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ss-live-")
        cls.ctl = "ipc://%s/ctl" % cls.dir
        cls.pub = "ipc://%s/pub" % cls.dir
        cls.inp = "ipc://%s/in" % cls.dir
        cfg = {
            "log_level": "info",
            "control": {"endpoint": cls.ctl},
            "publish": {"endpoint": cls.pub},
            "status_interval": 0.2,
            "feeds": [{
                "name": "cam1",
                "source": {"type": "zmq", "zmq": {"endpoint": cls.inp, "socket": "pull",
                                                  "bind": True}},
                "limits": {"max_width": W, "max_height": H},
                "queue": {"depth": 4, "policy": "block"},
                "pipeline": {"backend": "cpu", "threads": 1, "history": 10,
                             "whiten": {"degree": 1}},
            }],
        }
        cls.cfg_path = os.path.join(cls.dir, "skysieved.json")
        with open(cls.cfg_path, "w") as f:
            json.dump(cfg, f)
        cls.log = open(os.path.join(cls.dir, "log"), "w+")
        env = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM"):
            env.pop(k, None)
        cls.proc = subprocess.Popen([BINARY, "--config", cls.cfg_path], stdout=cls.log,
                                    stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                if sc.control(cls.ctl, "status", timeout=0.5)["ok"]:
                    break
            except TimeoutError:
                pass
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                cls.log.seek(0)
                raise RuntimeError("skysieved did not start:\n" + cls.log.read())
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        if cls.proc.poll() is None:
            cls.proc.kill()
            cls.proc.wait()
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_1_stream(self):
        rng = np.random.default_rng(11)
        stars = [(x, y, f) for x, y, f in zip(rng.uniform(5, W - 5, 120), rng.uniform(5, H - 5, 120),
                                              rng.pareto(1.0, 120) * 3000 + 3000)]
        mover_start = [(60.0, 70.0, 1.3, 0.9), (190.0, 180.0, -1.1, 1.2)]
        mover_flux = 6000.0
        truth = {}
        topics = ("detections.", "residual.", "tracks.", "status")
        with sc.Subscriber(self.pub, topics=topics) as sub, \
                sc.Sender(self.inp, feed="cam1", sndhwm=100) as tx:
            # a status message proves the subscription reached the daemon
            deadline = time.monotonic() + 20
            while True:
                m = sub.recv(timeout=1.0)
                if m is not None and m.type == "status":
                    break
                self.assertLess(time.monotonic(), deadline, "no status message")
            for k in range(FRAMES):
                shift = rng.normal(0.0, 0.7, 2)
                movers = [(x + vx * k, y + vy * k, mover_flux) for x, y, vx, vy in mover_start]
                truth[k] = [(x, y) for x, y, _ in movers]
                tx.send_frame(render(rng, stars, movers, shift), seq=k, mjd=61000.0 + k / 86400.0,
                              exposure=1.0)
            dets, residuals, tracks, ok = {}, {}, {}, set()
            deadline = time.monotonic() + 120
            last_result = time.monotonic()
            # every frame's detections and residual, then the tracks messages
            # that follow the last ones (1 s without a result message)
            while (len(dets) < FRAMES or len(residuals) < FRAMES
                   or time.monotonic() - last_result < 1.0) and time.monotonic() < deadline:
                m = sub.recv(timeout=0.5)
                if m is None or m.type == "status":
                    continue
                last_result = time.monotonic()
                self.assertEqual(m.feed, "cam1")
                if m.type == "detections":
                    self.assertNotIn(m.seq, dets)
                    dets[m.seq] = m
                    if m.status == "ok":
                        ok.add(m.seq)
                elif m.type == "tracks":
                    self.assertNotIn(m.seq, tracks)
                    self.assertIn(m.seq, dets, "a tracks message after its frame's detections")
                    tracks[m.seq] = m
                else:
                    self.assertNotIn(m.seq, residuals)
                    residuals[m.seq] = m
        self.assertEqual(sorted(dets), list(range(FRAMES)))
        # a residual for every frame; all NaN where there was no prediction yet
        self.assertEqual(sorted(residuals), list(range(FRAMES)))
        for k, r in residuals.items():
            if k not in ok:
                self.assertEqual(r.pixels.shape, (H, W))
                self.assertFalse(np.isfinite(r.pixels).any())
        self.assertGreaterEqual(len(ok), FRAMES // 3)
        found = wanted = 0
        for k in ok:
            r = residuals[k]
            self.assertEqual(r.pixels.shape, (H, W))
            self.assertEqual(r.pixels.dtype, np.float32)
            self.assertFalse(r.pixels.flags.writeable)      # a view of the message, no copy
            self.assertEqual(r.status, "ok")
            self.assertGreater(r.sigma, 0)
            finite = np.isfinite(r.pixels)
            self.assertGreater(finite.mean(), 0.5)
            if r.mask is not None:
                self.assertTrue(np.array_equal(r.mask.astype(bool), finite))
            # the residual is whitened: its robust spread is the reported sigma
            # (within the noise of a MAD estimate and the guided filter)
            v = r.pixels[finite]
            mad = 1.4826 * np.median(np.abs(v - np.median(v)))
            self.assertLess(abs(mad / r.sigma - 1.0), 0.25)
            for x, y in truth[k]:
                wanted += 1
                if any(d["sign"] > 0 and np.hypot(d["x"] - x, d["y"] - y) < MATCH_PX
                       for d in dets[k].detections):
                    found += 1
        print("live: %d frames, %d with a residual, movers found %d of %d"
              % (FRAMES, len(ok), found, wanted))
        self.assertGreaterEqual(found, 0.9 * wanted)

        # each mover is a track by the last frame: at its position, with its
        # velocity (frames 1 s apart: px/s = px/frame), and its detection
        # there names the track
        last = max(ok)
        self.assertIn(last, tracks, "no track reports at the last frame")
        ids = set()
        for (x, y), (_, _, vx, vy) in zip(truth[last], mover_start):
            near = [t for t in tracks[last].tracks
                    if np.hypot(t["position"]["x"] - x, t["position"]["y"] - y) < MATCH_PX]
            self.assertEqual(len(near), 1, tracks[last].tracks)
            t = near[0]
            self.assertEqual((t["kind"], t["state"], t["velocity"]["unit"]),
                             ("point", "active", "px/s"))
            self.assertEqual(t["last"]["seq"], last)
            self.assertGreaterEqual(t["n"], 3)
            # the movers are drawn in frame pixels: the pointing jitter (0.7 px)
            # is in their motion on the sky, and in the velocity's error
            for axis, v in (("x", vx), ("y", vy)):
                dv = abs(t["velocity"][axis] - v)
                self.assertLess(dv, 0.15, t)
                self.assertLess(dv, 4 * t["velocity"]["err_" + axis], t)
            self.assertEqual(t["points"][-1]["seq"], last)
            print("live: mover (%+.1f, %+.1f) px/s: track %d, n %d, velocity (%+.3f, %+.3f) "
                  "+- (%.3f, %.3f), rms %.3f px" % (vx, vy, t["id"], t["n"], t["velocity"]["x"],
                                                    t["velocity"]["y"], t["velocity"]["err_x"],
                                                    t["velocity"]["err_y"], t["rms"]))
            d = [d for d in dets[last].detections
                 if np.hypot(d["x"] - x, d["y"] - y) < MATCH_PX and d["sign"] > 0]
            self.assertEqual([e["track"] for e in d], [t["id"]])
            ids.add(t["id"])
        self.assertEqual(len(ids), 2)
        # every id a detection carries is reported at that frame
        for k, m in dets.items():
            linked = {d["track"] for d in m.detections if d["track"]}
            reported = {t["id"] for t in tracks[k].tracks} if k in tracks else set()
            self.assertLessEqual(linked, reported, "frame %d" % k)

        stats = sc.control(self.ctl, "stats")
        self.assertTrue(stats["ok"])
        f = stats["feeds"][0]
        self.assertEqual(f["name"], "cam1")
        self.assertEqual(f["received"], FRAMES)
        self.assertEqual(f["accepted"], FRAMES)
        self.assertEqual(f["processed"], FRAMES)
        self.assertEqual(f["received"], f["accepted"] + f["rejected"])
        self.assertEqual(f["status"]["ok"], len(ok))
        # a detections and a residual message per frame, and the tracks messages
        self.assertEqual(f["published"], 2 * FRAMES + len(tracks))

    def test_2_control(self):
        st = sc.control(self.ctl, "status")
        self.assertTrue(st["ok"])
        self.assertEqual(st["feeds"][0]["name"], "cam1")
        cfg = sc.control(self.ctl, "config")
        self.assertTrue(cfg["ok"])
        self.assertEqual(cfg["config"]["feeds"][0]["name"], "cam1")
        self.assertEqual(cfg["config"]["control"]["endpoint"], self.ctl)
        reset = sc.control(self.ctl, "reset", feed="cam1")
        self.assertTrue(reset["ok"])
        self.assertEqual(reset["feeds"], ["cam1"])
        bad = sc.control(self.ctl, "stats", feed="nope")
        self.assertFalse(bad["ok"])
        self.assertIn("nope", bad["error"])
        with self.assertRaises(ValueError):
            sc.control(self.ctl, "frobnicate")

    def test_3_sigterm(self):
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=60), 0)
        self.log.seek(0)
        self.assertIn("feed cam1 final: received=%d" % FRAMES, self.log.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
