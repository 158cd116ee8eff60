#!/usr/bin/python3
"""Unit tests of clients/python/skysieve_client.py.

 - The golden messages of tests/golden/ decode to what their expected.json
   says: the same canonical views tests/check_proto.c compares, so the C
   codec and this client read every message identically.
 - Every malformed message of tests/golden/malformed.json (inputs, and
   outputs marked "decoder": "output") is rejected with the reason and the
   exact text the C codec gives.
 - Live sockets on 127.0.0.1: Sender -> PULL, PUB -> Subscriber (feed
   filter, zero-copy pixels), control() against a REP socket.
 - When the tools are built (SKYSIEVE_BINARY_DIR/tools), skysieve-send
   and skysieve-sub against this client's sockets.

Run with Debian's python3 (python3-zmq, python3-numpy): exits 77 (ctest:
skipped) when those modules are missing.
"""
import json
import math
import os
import subprocess
import sys
import threading
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

SOURCE = os.environ.get("SKYSIEVE_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
BINARY = os.environ.get("SKYSIEVE_BINARY_DIR", "")
GOLDEN = os.path.join(SOURCE, "tests", "golden")
TOL_REL = 1e-12


def golden_parts(name):
    d = os.path.join(GOLDEN, name)
    files = sorted(f for f in os.listdir(d) if f[0].isdigit())
    parts = []
    for f in files:
        with open(os.path.join(d, f), "rb") as fp:
            parts.append(fp.read())
    return parts


def expected(name):
    with open(os.path.join(GOLDEN, name, "expected.json")) as fp:
        return json.load(fp)


def nn(v):
    """JSON's view of a number: NaN -> null."""
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def pixels_view(a):
    return [nn(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def view_input(m):
    v = {"type": m.type, "series": m.series, "feed": m.feed, "mjd": m.mjd,
         "frames": m.frames, "meta": m.meta}
    if m.type == "frame":
        v.update(seq=m.seq, exposure=m.exposure, width=m.width, height=m.height,
                 dtype=m.dtype, wcs=m.wcs, pixels=pixels_view(m.pixels),
                 mask=None if m.mask is None else [int(x) for x in m.mask.ravel()])
    return v


def view_result(m):
    v = {"type": m.type, "feed": m.feed, "series": m.series, "seq": m.seq, "input": m.input,
         "mjd": m.mjd, "exposure": m.exposure, "width": m.width, "height": m.height, "status": m.status,
         "reason": m.reason, "shift": m.shift, "sigma": nn(m.sigma),
         "history_len": m.history_len, "rereferenced": m.rereferenced,
         "history_reset": m.history_reset, "meta": m.meta}
    if m.type == "residual":
        v.update(weights=[nn(w) for w in m.weights], wcs=m.wcs, pixels=pixels_view(m.pixels),
                 mask=None if m.mask is None else [int(x) for x in m.mask.ravel()])
    elif m.type == "tracks":
        v.update(truncated=m.truncated, tracks=m.tracks)
    else:
        v.update(truncated=m.truncated, detections=m.detections)
    return v


def view_status(m):
    return {"version": m.version, "mjd": m.mjd, "uptime_s": m.uptime_s, "feeds": m.feeds}


class JsonEqual:
    def assertJsonEqual(self, got, want, path="$"):
        if isinstance(want, bool) or isinstance(got, bool):
            self.assertIs(got, want, path)
        elif isinstance(want, (int, float)) and isinstance(got, (int, float)):
            ok = got == want or abs(got - want) <= TOL_REL * max(abs(got), abs(want))
            self.assertTrue(ok, "%s: %r != %r" % (path, got, want))
        elif isinstance(want, dict):
            self.assertIsInstance(got, dict, path)
            self.assertEqual(sorted(got), sorted(want), "%s: keys differ" % path)
            for k in want:
                self.assertJsonEqual(got[k], want[k], "%s.%s" % (path, k))
        elif isinstance(want, list):
            self.assertIsInstance(got, list, path)
            self.assertEqual(len(got), len(want), "%s: lengths differ" % path)
            for i, (g, w) in enumerate(zip(got, want)):
                self.assertJsonEqual(g, w, "%s[%d]" % (path, i))
        else:
            self.assertEqual(got, want, path)


class TestGolden(unittest.TestCase, JsonEqual):
    def test_inputs(self):
        for name in ("frame_u16", "frame_f32_minimal", "series_start", "series_end"):
            with self.subTest(name=name):
                m = sc.decode_input(golden_parts(name))
                self.assertJsonEqual(view_input(m), expected(name))

    def test_frame_pixels_are_views(self):
        parts = golden_parts("frame_u16")
        m = sc.decode_input(parts)
        self.assertEqual(m.pixels.dtype, np.dtype("<u2"))
        self.assertEqual(m.pixels.shape, (3, 4))
        self.assertEqual(int(m.pixels[0, 3]), 65535)  # x = 3, y = 0: rows first
        self.assertFalse(m.pixels.flags.owndata)
        self.assertTrue(np.signbit(sc.decode_input(golden_parts("frame_f32_minimal")).pixels[1, 2]))

    def test_outputs(self):
        for name in ("residual", "detections", "detections_regfail", "tracks", "status"):
            with self.subTest(name=name):
                m = sc.decode_output(golden_parts(name))
                v = view_status(m) if m.type == "status" else view_result(m)
                self.assertJsonEqual(v, expected(name))

    def test_tracks(self):
        m = sc.decode_output(golden_parts("tracks"))
        self.assertIsInstance(m, sc.Tracks)
        self.assertEqual((m.topic, m.count, [t["id"] for t in m.tracks]), ("tracks.cam1", 2, [7, 8]))
        t7, t8 = m.tracks
        self.assertEqual((t7["velocity"]["unit"], t8["velocity"]["unit"]), ("px/s", "px/frame"))
        self.assertEqual(t7["last"]["time"], m.header["time_mid"])   # mid-exposure of its frame
        self.assertEqual(t7["points"][-1]["seq"], m.seq)
        self.assertIsNone(t8["rate"])
        self.assertIsNone(t8["first"]["mjd"])
        # the detection it took carries its id
        d = sc.decode_output(golden_parts("detections"))
        self.assertEqual([x["track"] for x in d.detections], [7, 0, 0, 0])
        self.assertEqual((d.detections[0]["x"], d.detections[0]["y"]),
                         (t7["position"]["x"], t7["position"]["y"]))

    def test_detection_track_optional(self):
        # a body without "track" (an older sender) reads as 0
        body = golden_parts("detections")[1].replace(b',"track":7', b"")
        m = sc.decode_output([b"detections.cam1", body])
        self.assertEqual(m.detections[0]["track"], 0)

    def test_residual_without_mask(self):
        m = sc.decode_output(golden_parts("residual")[:3])
        self.assertIsNone(m.mask)
        self.assertTrue(math.isnan(m.pixels[0, 2]))

    def test_control(self):
        r = sc.decode_request(golden_parts("control_request")[0])
        self.assertJsonEqual(r, expected("control_request"))
        for name in ("control_response_ok", "control_response_error", "control_response_status"):
            with self.subTest(name=name):
                ok, cmd, error, body = sc.decode_response(golden_parts(name)[0])
                self.assertJsonEqual({"ok": ok, "cmd": cmd, "error": error, "body": body},
                                     expected(name))
        # the status response's members are a status body
        _, _, _, body = sc.decode_response(golden_parts("control_response_status")[0])
        st = sc.decode_status_body(json.dumps(body).encode())
        self.assertEqual([f["name"] for f in st.feeds], ["cam1", "cam2"])
        self.assertEqual(st.feeds[0]["processed"], 986)

    def test_encoder_matches_golden_meaning(self):
        # this client's encoding of the frame_u16 fixture says the same as the
        # C encoder's golden header, member for member
        want = expected("frame_u16")
        px = np.array(want["pixels"], dtype=np.uint16).reshape(3, 4)
        mk = np.array(want["mask"], dtype=np.uint8).reshape(3, 4)
        parts = sc.encode_frame(px, seq=42, mjd=61366.25, feed="cam1", series="night-2026-11-22",
                                exposure=2.5, wcs=want["wcs"], meta=want["meta"], mask=mk)
        golden = json.loads(golden_parts("frame_u16")[0])
        self.assertJsonEqual(json.loads(bytes(parts[0])), golden)
        self.assertEqual(bytes(parts[1]), golden_parts("frame_u16")[1])
        self.assertEqual(bytes(parts[2]), golden_parts("frame_u16")[2])
        self.assertJsonEqual(view_input(sc.decode_input(parts)), want)
        s = sc.encode_series("start", "night-2026-11-22", feed="cam1", mjd=61366.25, frames=100,
                             meta={"program": "survey"})
        self.assertEqual(json.loads(s[0]), json.loads(golden_parts("series_start")[0]))

    def test_time(self):
        self.assertEqual(sc.iso_to_mjd("2026-11-22T06:00:00Z"), 61366.25)
        self.assertEqual(sc.iso_to_mjd("2026-11-22"), 61366.0)
        self.assertEqual(sc.mjd_to_iso(61366.2505), "2026-11-22T06:00:43.200Z")
        for bad in ("2026-11-22Z", "2026-13-01T00:00:00", "2026-11-22T06:00:00+01:00",
                    "2026-11-22T06:00:nan", "yesterday"):
            self.assertIsNone(sc.iso_to_mjd(bad), bad)


class TestMalformed(unittest.TestCase):
    def test_cases(self):
        with open(os.path.join(GOLDEN, "malformed.json")) as fp:
            cases = json.load(fp)
        self.assertGreaterEqual(len(cases), 30)
        for c in cases:
            with self.subTest(case=c["name"]):
                lim = sc.Limits(**c.get("limits", {}))
                parts = []
                for p in c["parts"]:
                    if isinstance(p, str):
                        parts.append(p.encode("utf-8"))
                    elif "bytes" in p:
                        parts.append(bytes(p["bytes"]))
                    else:
                        parts.append(bytes([p.get("fill", 0)]) * p["size"])
                decode = sc.decode_output if c.get("decoder") == "output" else sc.decode_input
                with self.assertRaises(sc.ProtocolError) as cm:
                    decode(parts, lim)
                self.assertEqual(cm.exception.reason, c["reason"], cm.exception.text)
                self.assertEqual(cm.exception.text, c["error"])

    def test_outputs(self):
        parts = golden_parts("residual")
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_output([b"residual.cam2"] + parts[1:])
        self.assertEqual(cm.exception.text,
                         'topic "residual.cam2" does not match the body (expected "residual.cam1")')
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_output(parts[:2])
        self.assertEqual(cm.exception.text, "missing part: 2 of 3 (%s)" % sc.RESIDUAL_PARTS_TEXT)
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_output(parts[:2] + [parts[2][:-4], parts[3]])
        self.assertEqual(cm.exception.reason, "data_size")
        body = golden_parts("detections")[1].replace(b'"count":4', b'"count":5')
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_output([b"detections.cam1", body])
        self.assertEqual(cm.exception.text, 'field "count" is 5 but "detections" has 4 entries')
        body = golden_parts("tracks")[1].replace(b'"unit":"px/frame"', b'"unit":"px"')
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_output([b"tracks.cam1", body])
        self.assertEqual(cm.exception.text,
                         'field "tracks[1].velocity.unit" is "px" (expected px/s or px/frame)')
        with self.assertRaises(sc.ProtocolError) as cm:
            sc.decode_request(b'{"cmd":"shutdown"}')
        self.assertEqual(cm.exception.text, 'unknown command "shutdown" (expected status, stats, '
                         'reset, reload or config)')


def free_tcp_endpoint(sock):
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return "tcp://127.0.0.1:%d" % port


class TestForms(unittest.TestCase):
    """The residual's other forms and the stamps (PROTOCOL.md §5a, §5b),
    decoded from messages made here."""

    HDR = {"protocol": 1, "type": "residual", "feed": "cam1", "seq": 8, "mjd": None,
           "width": 3, "height": 2, "status": "ok", "reason": "", "shift": None, "sigma": 2.0,
           "history_len": 4, "weights": [0.5, 0.5]}

    def msg(self, topic, hdr, *parts):
        return [topic.encode()] + [json.dumps(hdr).encode()] + [bytes(p) for p in parts]

    def test_float16(self):
        px = np.array([[0.5, -1.25, np.nan], [3, 60000, 1e-8]], "<f4")
        hdr = dict(self.HDR, dtype="f16", every=4)
        m = sc.decode_output(self.msg("residual16_every.cam1", hdr, px.astype("<f2").tobytes()))
        self.assertEqual((m.form, m.dtype, m.every), ("residual16_every", "f16", 4))
        self.assertEqual(m.pixels.dtype, np.dtype("<f2"))
        np.testing.assert_array_equal(m.pixels, px.astype(np.float16))
        with self.assertRaises(sc.ProtocolError) as e:
            sc.decode_output(self.msg("residual16.cam1", dict(self.HDR, dtype="f32"),
                                      px.tobytes()))
        self.assertEqual(str(e.exception), 'unknown dtype "f32" (a residual16 message is f16)')
        with self.assertRaises(sc.ProtocolError) as e:     # f16 bytes on the float32 topic
            sc.decode_output(self.msg("residual.cam1", dict(self.HDR, dtype="f32"),
                                      px.astype("<f2").tobytes()))
        self.assertEqual(e.exception.reason, "data_size")

    def test_stamps(self):
        body = dict(self.HDR, type="stamps", width=300, height=200, dtype="f32", count=2,
                    truncated=1, origin=[10, 20],
                    stamps=[{"det": 0, "kind": "point", "x": 15.2, "y": 24.9, "x0": 10,
                             "y0": 20, "w": 3, "h": 2},
                            {"det": 1, "kind": "streak", "x": 100.0, "y": 50.0, "x0": 90,
                             "y0": 45, "w": 4, "h": 1}])
        del body["weights"]
        px = np.arange(10, dtype="<f4")
        m = sc.decode_output(self.msg("stamps.cam1", body, px.tobytes()))
        self.assertEqual((m.type, m.count, m.truncated, m.origin), ("stamps", 2, 1, [10, 20]))
        np.testing.assert_array_equal(m.stamps[0]["pixels"], [[0, 1, 2], [3, 4, 5]])
        np.testing.assert_array_equal(m.stamps[1]["pixels"], [[6, 7, 8, 9]])
        with self.assertRaises(sc.ProtocolError) as e:
            sc.decode_output(self.msg("stamps.cam1", body, px[:9].tobytes()))
        self.assertEqual(str(e.exception), "pixel part is 36 bytes; the stamps say 40")
        with self.assertRaises(sc.ProtocolError) as e:
            sc.decode_output(self.msg("stamps.cam1", body))
        self.assertEqual(e.exception.reason, "missing_part")


class TestLive(unittest.TestCase, JsonEqual):
    def setUp(self):
        self.ctx = zmq.Context()
        self.socks = []

    def socket(self, kind):
        s = self.ctx.socket(kind)
        self.socks.append(s)
        return s

    def tearDown(self):
        for s in self.socks:
            s.close(0)
        self.ctx.term()

    def test_subscriber_gaps(self):
        """topic_seq: a message after a gap carries m.gap, sub.missed adds up
        per topic (PROTOCOL.md §2, "Gaps")."""
        pub = self.socket(zmq.PUB)
        ep = free_tcp_endpoint(pub)
        parts = golden_parts("detections")
        body = json.loads(parts[1])
        sub = sc.Subscriber(ep, topics=("detections.",), context=self.ctx)
        self.socks.append(sub.sock)
        got = []
        deadline = time.monotonic() + 10
        seqs = [0, 1, 4, 5]
        while len(got) < len(seqs) and time.monotonic() < deadline:
            if not got:                 # until the subscription is through
                body["topic_seq"] = 0
                pub.send_multipart([parts[0], json.dumps(body).encode()])
                m = sub.recv(timeout=0.1)
                if m is not None:
                    got.append(m)
                continue
            for q in seqs[1:]:
                body["topic_seq"] = q
                pub.send_multipart([parts[0], json.dumps(body).encode()])
            while len(got) < len(seqs):
                m = sub.recv(timeout=5)
                self.assertIsNotNone(m)
                if m.topic_seq != 0:    # a late repeat of the probe: no gap
                    got.append(m)
        self.assertEqual([m.topic_seq for m in got], seqs)
        self.assertEqual([m.gap for m in got], [0, 0, 2, 0])
        self.assertEqual(sub.missed, 2)

    def test_sender_to_pull(self):
        pull = self.socket(zmq.PULL)
        ep = free_tcp_endpoint(pull)
        rng = np.random.default_rng(7)
        img = rng.integers(0, 65535, size=(48, 64), dtype=np.uint16)
        mask = rng.integers(0, 2, size=img.shape)
        with sc.Sender(ep, context=self.ctx, feed="cam9", send_timeout=5) as tx:
            tx.series_start("s9", frames=2, mjd=61366.0)
            tx.send_frame(img, seq=1, mjd=61366.25, exposure=1.5, mask=mask,
                          wcs={"CTYPE1": "RA---TAN", "CRVAL1": 10.5}, meta={"k": [1, 2]})
            tx.send_frame(img.astype(np.float32).byteswap().newbyteorder(), seq=2, mjd=61366.26)
            tx.series_end("s9", frames=2)
            got = []
            for _ in range(4):
                self.assertTrue(pull.poll(5000), "nothing received")
                got.append(sc.decode_input(pull.recv_multipart(copy=False)))
        self.assertEqual([m.type for m in got], ["series_start", "frame", "frame", "series_end"])
        f = got[1]
        self.assertEqual((f.seq, f.feed, f.dtype, f.exposure), (1, "cam9", "u16", 1.5))
        np.testing.assert_array_equal(f.pixels, img)
        np.testing.assert_array_equal(f.mask, (mask != 0).astype(np.uint8))
        self.assertEqual(f.wcs, {"CTYPE1": "RA---TAN", "CRVAL1": 10.5})
        self.assertEqual(f.meta, {"k": [1, 2]})
        # a big-endian array goes out little-endian with the same values
        self.assertEqual(got[2].dtype, "f32")
        np.testing.assert_array_equal(got[2].pixels, img.astype(np.float32))
        self.assertEqual(got[3].frames, 2)

    def test_pub_to_subscriber(self):
        pub = self.socket(zmq.PUB)
        ep = free_tcp_endpoint(pub)
        residual = golden_parts("residual")
        dets = golden_parts("detections")
        other = [b"detections.cam10", dets[1].replace(b'"feed":"cam1"', b'"feed":"cam10"')]
        with sc.Subscriber(ep, feed="cam1", context=self.ctx) as sub:
            # ZeroMQ's slow joiner: publish until the subscription is in place
            m = None
            deadline = time.monotonic() + 10
            while m is None and time.monotonic() < deadline:
                pub.send_multipart(other)
                pub.send_multipart(residual)
                m = sub.recv(timeout=0.1)
            self.assertIsNotNone(m, "no message within 10 s")
            self.assertEqual(m.type, "residual")
            # zero copy: the array is a read-only view on the ZeroMQ frame
            self.assertFalse(m.pixels.flags.owndata)
            self.assertFalse(m.pixels.flags.writeable)
            root = m.pixels
            while isinstance(root, np.ndarray) and root.base is not None:
                root = root.base
            self.assertIsInstance(root, memoryview)
            self.assertIsInstance(root.obj, zmq.Frame)
            self.assertEqual(m.pixels.shape, (2, 3))
            self.assertEqual(float(m.pixels[1, 2]), -7.5)
            self.assertJsonEqual(view_result(m), expected("residual"))
            pub.send_multipart(other)        # cam10: filtered out by the exact topic match
            pub.send_multipart(dets)
            m = sub.recv(timeout=5)
            while m is not None and m.type == "residual":
                m = sub.recv(timeout=5)
            self.assertIsNotNone(m)
            self.assertEqual((m.type, m.feed, m.count), ("detections", "cam1", 4))
            self.assertEqual(m.detections[1]["ends"], [[70.5, 48.25], [130.5, 52.25]])
            self.assertIsNone(sub.recv(timeout=0.2))

    def test_tracks_subscriber(self):
        """A Subscriber to "tracks." with a feed gets that feed's tracks
        messages as Tracks, and follows their topic_seq."""
        pub = self.socket(zmq.PUB)
        ep = free_tcp_endpoint(pub)
        parts = golden_parts("tracks")
        body = json.loads(parts[1])
        other = [b"tracks.cam10", parts[1].replace(b'"feed":"cam1"', b'"feed":"cam10"')]
        with sc.Subscriber(ep, topics=("tracks.",), feed="cam1", context=self.ctx) as sub:
            m, q = None, 0
            deadline = time.monotonic() + 10
            while m is None and time.monotonic() < deadline:
                pub.send_multipart(other)
                body["topic_seq"] = q
                pub.send_multipart([parts[0], json.dumps(body).encode()])
                q += 1
                m = sub.recv(timeout=0.1)
            self.assertIsNotNone(m, "no message within 10 s")
            self.assertIsInstance(m, sc.Tracks)
            self.assertEqual((m.type, m.feed, m.count), ("tracks", "cam1", 2))
            self.assertJsonEqual(view_result(m), expected("tracks"))
            # a gap on this topic
            body["topic_seq"] = q + 5
            pub.send_multipart(other)
            pub.send_multipart([parts[0], json.dumps(body).encode()])
            prev, m2 = m.topic_seq, sub.recv(timeout=5)
            while m2 is not None and m2.topic_seq < q + 5:     # late repeats of the probe
                prev, m2 = m2.topic_seq, sub.recv(timeout=5)
            self.assertIsNotNone(m2)
            self.assertEqual(m2.gap, q + 5 - (prev + 1))

    def test_control(self):
        rep = self.socket(zmq.REP)
        ep = free_tcp_endpoint(rep)
        answer = golden_parts("control_response_status")[0]
        seen = []

        def serve():
            if rep.poll(5000):
                seen.append(sc.decode_request(rep.recv()))
                rep.send(answer)

        t = threading.Thread(target=serve)
        t.start()
        r = sc.control(ep, "status", feed="cam1", context=self.ctx)
        t.join()
        self.assertEqual(seen, [{"cmd": "status", "feed": "cam1"}])
        self.assertTrue(r["ok"])
        self.assertEqual(r["feeds"][0]["name"], "cam1")
        with self.assertRaises(TimeoutError):
            sc.control(ep, "stats", timeout=0.2, context=self.ctx)


def tool(name):
    p = os.path.join(BINARY, "tools", name) if BINARY else ""
    return p if p and os.access(p, os.X_OK) else None


class TestTools(unittest.TestCase):
    """The C tools against this client: the two implementations interoperate."""

    def setUp(self):
        self.ctx = zmq.Context()
        self.socks = []

    def socket(self, kind):
        s = self.ctx.socket(kind)
        self.socks.append(s)
        return s

    def tearDown(self):
        for s in self.socks:
            s.close(0)
        self.ctx.term()

    @unittest.skipUnless(tool("skysieve-send"), "skysieve-send not built")
    def test_send_synthetic(self):
        pull = self.socket(zmq.PULL)
        ep = free_tcp_endpoint(pull)
        p = subprocess.run([tool("skysieve-send"), "--synth", "--count", "3", "--size", "64x48",
                            "--feed", "cam3", "--series", "t1", "--endpoint", ep],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = []
        while pull.poll(2000):
            got.append(sc.decode_input(pull.recv_multipart(copy=False)))
        self.assertEqual([m.type for m in got], ["series_start"] + ["frame"] * 3 + ["series_end"])
        self.assertEqual([m.seq for m in got[1:4]], [0, 1, 2])
        for m in got[1:4]:
            self.assertEqual((m.width, m.height, m.feed, m.series), (64, 48, "cam3", "t1"))
            self.assertGreater(float(m.pixels.astype(np.float64).std()), 0.0)
        self.assertEqual(got[-1].frames, 3)

    @unittest.skipUnless(tool("skysieve-send") and tool("skysieve-synth"), "tools not built")
    def test_send_fits_files(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([tool("skysieve-synth"), "--out", d, "--frames", "3", "--size", "48x32",
                            "--start-mjd", "61366.25", "--interval", "2", "-q"], check=True,
                           timeout=60)
            files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".fits"))
            pull = self.socket(zmq.PULL)
            ep = free_tcp_endpoint(pull)
            p = subprocess.run([tool("skysieve-send"), "--endpoint", ep, "--feed", "camF", "--mask",
                                "--no-series", "--seq0", "100", "--rate", "50", "--timeout", "20",
                                "--meta", '{"site": "test"}'] + files,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
        got = []
        while pull.poll(2000):
            got.append(sc.decode_input(pull.recv_multipart(copy=False)))
        self.assertEqual([m.seq for m in got], [100, 101, 102])
        for k, m in enumerate(got):
            self.assertEqual((m.type, m.width, m.height, m.dtype, m.feed), ("frame", 48, 32, "u16",
                                                                            "camF"))
            self.assertEqual(m.meta, {"site": "test"})
            self.assertTrue(bool((m.mask == 1).all()))
            # DATE-OBS of the file, to the millisecond FITS keeps
            self.assertAlmostEqual((m.mjd - 61366.25) * 86400.0, 2.0 * k, delta=2e-3)

    @unittest.skipUnless(tool("skysieve-sub"), "skysieve-sub not built")
    def test_sub_saves_residuals(self):
        import shutil
        import tempfile
        pub = self.socket(zmq.PUB)
        ep = free_tcp_endpoint(pub)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "res")
            proc = subprocess.Popen([tool("skysieve-sub"), "--endpoint", ep, "--count", "1",
                                     "--timeout", "20", "--save-residuals", out, "--feed", "cam1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            residual = golden_parts("residual")
            deadline = time.monotonic() + 20
            while proc.poll() is None and time.monotonic() < deadline:
                pub.send_multipart(residual)
                time.sleep(0.05)
            _, err = proc.communicate(timeout=20)
            self.assertEqual(proc.returncode, 0, err)
            # the one naming rule: the client's function gives the tool's name
            m = sc.decode_output(residual)
            path = sc.residual_file_name(out, m.feed, m.seq, m.time, ".fits")
            self.assertRegex(os.path.basename(path), r"^cam1-0000000057-\d{8}T\d{6}\.\d{3}Z\.fits$")
            with open(path, "rb") as fp:
                head = fp.read(2880 * 4).decode("ascii", "replace")
            cards = {c[:8].strip(): c[10:].split("/")[0].strip()
                     for c in (head[i:i + 80] for i in range(0, len(head), 80)) if c[8:10] == "= "}
            self.assertEqual(cards.get("BITPIX"), "-32")
            self.assertEqual((cards.get("NAXIS1"), cards.get("NAXIS2")), ("3", "2"))
            self.assertEqual(cards.get("SEQ"), "57")
            if shutil.which("fitsverify"):
                v = subprocess.run(["fitsverify", "-q", "-e", path], capture_output=True, text=True)
                self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def run_sub(self, *args, golden="detections"):
        """skysieve-sub on one golden message (detections by default):
        (stdout, stderr)."""
        pub = self.socket(zmq.PUB)
        ep = free_tcp_endpoint(pub)
        proc = subprocess.Popen([tool("skysieve-sub"), "--endpoint", ep, "--count", "1",
                                 "--timeout", "20", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        msg = golden_parts(golden)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            pub.send_multipart(msg)
            time.sleep(0.05)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        return out, err

    @unittest.skipUnless(tool("skysieve-sub"), "skysieve-sub not built")
    def test_sub_prints_readable_lines(self):
        """By default one line per frame, then one per detection that is not
        a cosmic (issue 10: a 540-character JSON line per detection was
        what a newcomer saw)."""
        out, _ = self.run_sub()
        lines = out.splitlines()
        want = expected("detections")
        self.assertTrue(lines[0].startswith("cam1 #57 img_0057.fits 2026-11-22T06:00:43.200Z ok shift ("),
                        lines[0])
        kinds = [d["kind"] for d in want["detections"]]
        self.assertIn("%d point, %d streak, %d cosmic" % (kinds.count("point"),
                      kinds.count("streak"), kinds.count("cosmic")), lines[0])
        shown = [d for d in want["detections"] if d["kind"] != "cosmic"]
        self.assertEqual(len(lines), 1 + len(shown))
        for line, d in zip(lines[1:], shown):
            label = "gone" if d.get("sign", 1) < 0 else d["kind"]
            self.assertTrue(line.startswith("    " + label), line)
            self.assertLess(len(line), 100)
            self.assertEqual(" mag " in line, d["mag"] is not None, line)
            # the track a detection belongs to, when it belongs to one
            self.assertEqual(line.endswith("  track %d" % d["track"]), d["track"] != 0, line)

    @unittest.skipUnless(tool("skysieve-sub"), "skysieve-sub not built")
    def test_sub_prints_tracks(self):
        """--tracks: one readable line per track report; with --json one
        line per tracks message, its body."""
        out, _ = self.run_sub("--tracks", "--feed", "cam1", golden="tracks")
        lines = out.splitlines()
        want = expected("tracks")["tracks"]
        self.assertEqual(len(lines), len(want), out)
        for line, t in zip(lines, want):
            head = "cam1 #57 track %d %s %s n=%d at (%.2f, %.2f) v (" % (
                t["id"], t["kind"], t["state"], t["n"], t["position"]["x"], t["position"]["y"])
            self.assertTrue(line.startswith(head), line)
            self.assertIn(") %s" % t["velocity"]["unit"], line)
            self.assertEqual('"/s PA ' in line, t["rate"] is not None, line)
            if t["mag"] is None:
                self.assertNotIn(" mag ", line)
            else:
                self.assertIn(" mag %.2f±%.2f" % (t["mag"], t["mag_err"]), line)
            # a timed track with a rate and a magnitude runs to ~115 characters
            self.assertLess(len(line), 120)
        out, _ = self.run_sub("--json", "--topic", "tracks.", golden="tracks")
        lines = out.splitlines()
        self.assertEqual(len(lines), 1, out)
        self.assertEqual(json.loads(lines[0]), json.loads(golden_parts("tracks")[1]))

    @unittest.skipUnless(tool("skysieve-sub"), "skysieve-sub not built")
    def test_sub_prints_detections(self):
        out, _ = self.run_sub("--json")
        lines = [json.loads(line) for line in out.splitlines()]
        want = expected("detections")["detections"]
        self.assertEqual(len(lines), len(want))
        for got, w in zip(lines, want):
            self.assertEqual((got["feed"], got["seq"]), ("cam1", 57))
            self.assertEqual((got["x"], got["y"], got["kind"]), (w["x"], w["y"], w["kind"]))


def star_field(rng, n, size, stars, shifts, mover):
    """n frames of a star field seen with the given shifts (frame pixel x sees
    sky x + s), Poisson noise on a sky of 1000 ADU, and a mover."""
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    frames = []
    for k in range(n):
        img = np.full((h, w), 1000.0)
        sx, sy = shifts[k]
        pts = [(x - sx, y - sy, f) for x, y, f in stars]
        mx, my = mover[0] + mover[2] * k, mover[1] + mover[3] * k
        pts.append((mx, my, mover[4]))
        for x, y, f in pts:
            img += f / (2 * np.pi * 1.4 ** 2) * np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * 1.4 ** 2))
        frames.append(rng.poisson(img).astype(np.uint16))
    return frames


class Daemon:
    """A skysieved of the build under test, on cfg written into directory d
    (its log there too); stop() ends it with SIGTERM (a kill after 30 s)
    and returns its exit status."""

    def __init__(self, d, cfg):
        path = os.path.join(d, "skysieved.json")
        with open(path, "w") as fp:
            json.dump(cfg, fp)
        self._log = open(os.path.join(d, "skysieved.log"), "w+")
        self.proc = subprocess.Popen([os.path.join(BINARY, "daemon", "skysieved"), "--config",
                                      path], stdout=self._log, stderr=subprocess.STDOUT)

    def log(self):
        self._log.seek(0)
        return self._log.read()

    def stop(self):
        import signal
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


class TestDaemon(unittest.TestCase):
    """This client against a running skysieved: frames in over PUSH/PULL,
    residuals and detections out over PUB/SUB, control over REQ/REP."""

    @unittest.skipUnless(BINARY and os.access(os.path.join(BINARY, "daemon", "skysieved"), os.X_OK)
                         and zmq.has("curve"), "skysieved not built, or libzmq without CURVE")
    def test_curve(self):
        """CURVE keys made by skysieve-keygen: the listed client's Subscriber
        and control() get in, an unknown key gets nothing."""
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="skysieve-py-curve-")
        keygen = os.path.join(BINARY, "tools", "skysieve-keygen")
        os.mkdir(os.path.join(d, "clients"))
        for name, where in (("daemon", d), ("good", os.path.join(d, "clients")), ("bad", d)):
            subprocess.run([keygen, name, where], check=True, stdout=subprocess.DEVNULL)
        good = (os.path.join(d, "clients", "good.key"), os.path.join(d, "daemon.pub"))
        bad = (os.path.join(d, "bad.key"), os.path.join(d, "daemon.pub"))
        self.assertIsNotNone(sc.read_key(good[0])[1])
        self.assertIsNone(sc.read_key(good[1])[1])
        out, ctl = ("ipc://%s/%s" % (d, n) for n in ("out", "ctl"))
        cfg = {"log_level": "warning", "control": {"endpoint": ctl},
               "publish": {"endpoint": out}, "status_interval": 0.2,
               "security": {"curve_key": os.path.join(d, "daemon.key"),
                            "client_keys": os.path.join(d, "clients")},
               "feeds": [{"name": "pycam", "source": {"type": "synth",
                                                      "synth": {"width": 64, "height": 64}},
                          "pipeline": {"threads": 1}}]}
        daemon = Daemon(d, cfg)
        ctx = zmq.Context()
        try:
            with sc.Subscriber(out, topics=("status",), context=ctx, curve=good) as ok_sub, \
                    sc.Subscriber(out, topics=("status",), context=ctx, curve=bad) as bad_sub:
                m = ok_sub.recv(timeout=30)
                self.assertIsNotNone(m, "the listed subscriber got nothing")
                self.assertEqual(m.type, "status")
                self.assertIsNone(bad_sub.recv(timeout=2), "an unknown key got a message")
            self.assertTrue(sc.control(ctl, "status", context=ctx, curve=good)["ok"])
            with self.assertRaises(TimeoutError):
                sc.control(ctl, "status", context=ctx, curve=bad, timeout=1)
        finally:
            ctx.destroy(linger=0)
            rc = daemon.stop()
        self.assertEqual(rc, 0, daemon.log())
        shutil.rmtree(d, ignore_errors=True)

    @unittest.skipUnless(BINARY and os.access(os.path.join(BINARY, "daemon", "skysieved"), os.X_OK),
                         "skysieved not built")
    def test_residual_forms(self):
        """The forms a subscriber names (PROTOCOL.md §5a, §5b), decoded with
        numpy: float16 equal to numpy's round-to-nearest-even float16 of
        the float32 residual (NaN where it is NaN), every-k residuals only
        for seq % k == 0 and equal to the float32 one, stamps equal to the
        float32 residual at their boxes."""
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="skysieve-py-forms-")
        out, ctl = ("ipc://%s/%s" % (d, n) for n in ("out", "ctl"))
        k_every = 4
        cfg = {"log_level": "warning", "control": {"endpoint": ctl}, "status_interval": 0.2,
               "publish": {"endpoint": out, "every": k_every, "stamps": {"size": 15}},
               "feeds": [{"name": "pycam",
                          "source": {"type": "synth",
                                     "synth": {"rate": 10, "width": 128, "height": 128,
                                               "n_stars": 60, "n_movers": 2,
                                               "mover_snr": 20}},
                          "queue": {"policy": "block", "depth": 8},
                          "pipeline": {"backend": "cpu", "history": 6, "threads": 1,
                                       "registration": {"levels": 1}}}]}
        daemon = Daemon(d, cfg)
        ctx = zmq.Context()
        frames = {}
        checked = every = with_stamps = 0
        try:
            topics = ("residual.", "residual16.", "residual_every.", "stamps.", "detections.")
            with sc.Subscriber(out, topics=topics, feed="pycam", context=ctx) as sub:
                deadline = time.monotonic() + 90
                while checked < 10 and time.monotonic() < deadline:
                    if daemon.proc.poll() is not None:
                        self.fail("skysieved exited: %s" % daemon.log())
                    m = sub.recv(timeout=1.0)
                    if m is None or m.status != "ok":
                        continue
                    f = frames.setdefault(m.seq, {})
                    if m.type == "residual" and m.form == "residual_every":
                        self.assertEqual(m.seq % k_every, 0)
                        self.assertEqual(m.every, k_every)
                        if "residual" in f:
                            np.testing.assert_array_equal(m.pixels, f["residual"].pixels)
                            every += 1
                        continue
                    f[m.form if m.type == "residual" else m.type] = m
                    if len(f) < 4:
                        continue
                    r32 = f["residual"].pixels
                    r16 = f["residual16"].pixels
                    self.assertEqual(r16.dtype, np.dtype("<f2"))
                    nan = np.isnan(r32)
                    np.testing.assert_array_equal(np.isnan(r16), nan)
                    self.assertTrue(np.all(r16.view("<u2")[nan] == 0x7E00))
                    np.testing.assert_array_equal(r16.view("<u2")[~nan],
                                                  r32[~nan].astype(np.float16).view("<u2"))
                    st = f["stamps"]
                    self.assertEqual(st.count + st.truncated, len(f["detections"].detections))
                    ox, oy = st.origin
                    for s in st.stamps:
                        y0, x0 = s["y0"] - oy, s["x0"] - ox
                        np.testing.assert_array_equal(
                            s["pixels"], r32[y0:y0 + s["h"], x0:x0 + s["w"]])
                        if s["kind"] != "streak":
                            self.assertLessEqual(max(s["w"], s["h"]), 15)
                    checked += 1
                    with_stamps += st.count > 0
                    del frames[m.seq]
        finally:
            ctx.destroy(linger=0)
            rc = daemon.stop()
        self.assertEqual(checked, 10, "frames with all their forms: %d" % checked)
        self.assertGreater(every, 0)
        self.assertGreater(with_stamps, 5, "frames with stamps")
        self.assertEqual(rc, 0, daemon.log())
        shutil.rmtree(d, ignore_errors=True)

    @unittest.skipUnless(BINARY and os.access(os.path.join(BINARY, "daemon", "skysieved"), os.X_OK),
                         "skysieved not built")
    def test_round_trip(self):
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="skysieve-py-")
        src, out, ctl = ("ipc://%s/%s" % (d, n) for n in ("in", "out", "ctl"))
        cfg = {"log_level": "warning", "control": {"endpoint": ctl},
               "publish": {"endpoint": out}, "status_interval": 0.2,
               "feeds": [{"name": "pycam",
                          "source": {"type": "zmq",
                                     "zmq": {"endpoint": src, "socket": "pull", "bind": True}},
                          "limits": {"max_width": 256, "max_height": 256},
                          # every frame is processed: the sender is faster than the pipeline
                          "queue": {"policy": "block", "depth": 16},
                          # 128 px frames: one binning level leaves room for the block search
                          # one thread: OpenMP spinning on a loaded CI machine is slow
                          "pipeline": {"backend": "cpu", "history": 6, "threads": 1,
                                       "registration": {"levels": 1}}}]}
        daemon = Daemon(d, cfg)
        proc, daemon_log = daemon.proc, daemon.log

        ctx = zmq.Context()
        try:
            with sc.Subscriber(out, topics=("detections.", "residual.", "status"), feed="pycam",
                               context=ctx) as sub:
                # the daemon is up and we are subscribed once a status message arrives
                m, deadline = None, time.monotonic() + 30
                while (m is None or m.type != "status") and time.monotonic() < deadline:
                    if proc.poll() is not None:
                        self.fail("skysieved exited: %s" % daemon_log())
                    m = sub.recv(timeout=0.5)
                self.assertIsNotNone(m, "no status message from skysieved")
                self.assertEqual(m.feeds[0]["name"], "pycam")

                rng = np.random.default_rng(3)
                stars = [(rng.uniform(8, 120), rng.uniform(8, 120), rng.uniform(2e3, 4e4))
                         for _ in range(120)]
                n = 14
                shifts = [(0.0, 0.0)] + [tuple(rng.normal(0, 0.7, 2)) for _ in range(n - 1)]
                frames = star_field(rng, n, (128, 128), stars, shifts, (30, 40, 4.0, 3.0, 6000))
                with sc.Sender(src, context=ctx, send_timeout=10) as tx:
                    tx.series_start("py", frames=n)
                    for k, img in enumerate(frames):
                        tx.send_frame(img, seq=k, mjd=61366.25 + k * 1e-4, exposure=1.0,
                                      meta={"k": k})
                    tx.series_end("py", frames=n)

                dets, res = {}, {}
                deadline = time.monotonic() + 60
                while len(dets) < n and time.monotonic() < deadline:
                    m = sub.recv(timeout=1.0)
                    if m is None or m.type == "status":
                        continue
                    (dets if m.type == "detections" else res)[m.seq] = m
                self.assertEqual(sorted(dets), list(range(n)), "a detections message per frame")
                ok = [k for k in range(n) if dets[k].status == "ok"]
                self.assertGreater(len(ok), 0, [dets[k].status for k in range(n)])
                for k in range(n):
                    self.assertEqual(dets[k].meta, {"k": k})     # passed through
                for k in ok:
                    self.assertIn(k, res, "a residual message per ok frame")
                    r = res[k]
                    self.assertEqual(r.pixels.shape, (128, 128))
                    self.assertEqual(r.pixels.dtype, np.dtype("<f4"))
                    self.assertTrue(math.isfinite(r.sigma) and r.sigma > 0)
                    # the registration found the true shift (frame 0 is the reference)
                    self.assertLess(abs(r.shift["x"] - shifts[k][0]), 0.1)
                    self.assertLess(abs(r.shift["y"] - shifts[k][1]), 0.1)
                    # and the mover is among the detections
                    mx, my = 30 + 4.0 * k, 40 + 3.0 * k
                    near = [d for d in dets[k].detections
                            if abs(d["x"] - mx) < 2 and abs(d["y"] - my) < 2 and d["sign"] == 1]
                    self.assertTrue(near, "mover at (%.0f, %.0f) not found in frame %d" % (mx, my, k))

            st = sc.control(ctl, "stats", context=ctx)
            self.assertTrue(st["ok"], st)
            f = st["feeds"][0]
            self.assertEqual((f["name"], f["processed"], f["rejected"]), ("pycam", n, 0))
            bad = sc.control(ctl, "reset", feed="pycam", context=ctx)
            self.assertTrue(bad["ok"], bad)
        finally:
            ctx.destroy(linger=0)
            rc = daemon.stop()
        self.assertEqual(rc, 0, daemon_log())
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
