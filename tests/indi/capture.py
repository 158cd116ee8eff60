#!/usr/bin/python3
"""capture.py -- frames from the INDI CCD simulator, with their truth.

    /usr/bin/python3 tests/indi/capture.py --out DIR [--frames 25]
        [--mode static|jitter] [--exposure 0.5] [--timeout 150]

Starts `indiserver` with `indi_simulator_ccd` (Debian package indi-bin) on
a free port, with the gsc stand-in of this directory first on PATH, talks
to it as an INDI client on 127.0.0.1 (XML over TCP, stdlib only), sets the
chip, optics and pointing, takes --frames exposures, receives each as a
FITS BLOB and writes it to DIR/frame_NNN.fits (renamed into place), and
writes DIR/truth.txt. Everything it started is stopped by PID on exit,
failure, timeout or signal (and indiserver dies with this process:
PR_SET_PDEATHSIG).

With --frames 0 and --go-file it sets the simulator up (optics, pointing,
gsc stand-in) and takes no exposure: another client (skysieved in active
mode) takes them until the go file appears; no truth.txt. With --stop-file
the server stays up after the frames until that file appears: indiserver
discards what it has not yet sent to a slower client when it stops.

Modes: `static`, the pointing never changes; `jitter`, the pointing moves
between frames so that the star field moves by whole pixels, at most
--jitter px per axis (frame 0 unmoved). The simulator draws every star at
a whole pixel (skyfield.py), so only whole-pixel moves keep the field
exactly the same up to a shift.

truth.txt, one line per frame after '#' comments:

    index file dx dy mover_x mover_y mover_fx mover_fy

dx, dy: whole-pixel move of the star field since frame 0 (a star at x, y
in frame 0 is at x + dx, y + dy); mover_x, mover_y: the pixel the mover's
stamp is centred on; mover_fx, mover_fy: its unrounded projection.
Pixel coordinates are 0-based (pixel centres at integers), x the column
and y the row in file order, which is how CFITSIO and ss_fits_read_frame
return the pixels (the frames say ROWORDER = 'TOP-DOWN').

Every frame is checked against the truth before it is accepted: every
star and the mover must be found in the image where truth.txt says
(a wrong projection model, a second gsc call per frame, a pointing that
did not land on whole pixels all fail here, with what was found).

Exit status: 0 done; 1 failed (the reason on stderr); 3 indi-bin or
python3-numpy missing (the message says what to install).
"""
import argparse
import base64
import ctypes
import importlib.util
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import skyfield  # noqa: E402

DEVICE = "CCD Simulator"
EXIT_FAIL, EXIT_MISSING = 1, 3
# The pointing, JNow (what EQUATORIAL_PE takes): RA hours, Dec degrees.
# RA near 1 h keeps RA/Dec small, where the simulator's float parsing of
# the catalogue (sscanf %f) is exact to 0.003 px.
POINT_RA_H, POINT_DEC = 1.0, 10.0
GAIN = 90           # the simulator multiplies star and sky flux by 1 + sqrt(gain)
POLL_MS = 100       # driver timer: an exposure ends within this of its length
PORT_TRIES = 5


class Failure(Exception):
    """A capture failure; str() is the message for stderr."""


def log(msg):
    sys.stdout.write("capture: %s\n" % msg)
    sys.stdout.flush()


# ---- process handling ------------------------------------------------------

def _die_with_parent():
    """preexec_fn: SIGTERM this child when capture.py dies, even by SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port():
    """A TCP port free on this host now (indiserver binds 0.0.0.0: we ask
    the kernel for an unused one instead of guessing)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """indiserver + indi_simulator_ccd in a process group of their own."""

    def __init__(self, env, logpath, port=None, unix=None):
        self.proc = None
        self.port = None
        self.logpath = logpath
        self.env = env
        self.fixed_port = port      # --port: this port or fail (no retry on another)
        self.unix = unix            # --unix: the local socket's name

    def start(self, deadline):
        for attempt in range(PORT_TRIES):
            port = self.fixed_port or free_port()
            # -u: indiserver 1.9.9 also binds an abstract unix socket, by
            # default "/tmp/indiserver": a second server (another test, a
            # user's) would fail on it. -r 0: a crashing driver is an
            # error here, not something to restart quietly.
            unix = self.unix or "/tmp/skysieve-indi-%d-%d" % (os.getpid(), port)
            self.unix_name = unix
            cmd = ["indiserver", "-v", "-r", "0", "-p", str(port),
                   "-u", unix, "indi_simulator_ccd"]
            logf = open(self.logpath, "ab")
            self.proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=_die_with_parent)
            logf.close()
            self.port = port
            log("indiserver pid %d on port %d (%s)" % (self.proc.pid, port, " ".join(cmd)))
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    c = socket.create_connection(("127.0.0.1", port), timeout=1.0)
                    c.close()
                    return
                except OSError:
                    time.sleep(0.1)
            if self.proc.poll() is None:
                raise Failure("indiserver (pid %d) did not accept connections on port %d in time"
                              % (self.proc.pid, port))
            tail = self.log_tail()
            self.proc = None
            if "Address already in use" not in tail or self.fixed_port:
                raise Failure("indiserver exited at start-up:\n%s" % tail)
            log("port %d taken meanwhile, trying another" % port)
        raise Failure("indiserver: no free port after %d tries" % PORT_TRIES)

    def log_tail(self, n=15):
        try:
            with open(self.logpath, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"

    def stop(self):
        """Stop indiserver by PID, then anything left in its process group
        (the driver, normally gone already: it exits on its stdin's EOF)."""
        if self.proc is None:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for _ in range(50):
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None
        log("indiserver pid %d stopped" % pid)


# ---- INDI client -----------------------------------------------------------

class Indi:
    """A minimal INDI client: property state kept from def/set messages,
    new*Vector requests, waits with deadlines, BLOBs."""

    def __init__(self, port, deadline):
        self.sock = None
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=2.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise Failure("cannot connect to indiserver on 127.0.0.1:%d: %s" % (port, e))
                time.sleep(0.1)
        self.sock.setblocking(False)
        self.parser = ET.XMLPullParser(events=("start", "end"))
        self.parser.feed(b"<indi>")   # the stream has no root element: give it one
        self.depth = 0
        self.root = None
        self.props = {}               # name -> {"state", "values", "gen", "kind"}
        self.blobs = []               # (name, format, bytes)
        self.messages = []
        self.send('<getProperties version="1.7"/>')

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def send(self, text):
        self.sock.setblocking(True)
        self.sock.sendall(text.encode())
        self.sock.setblocking(False)

    def _handle(self, el):
        tag = el.tag
        if el.get("device") not in (None, DEVICE):
            return
        if tag == "message":
            m = el.get("message", "")
            self.messages.append(m)
            log("driver says: %s" % m)
            return
        if tag == "delProperty":
            self.props.pop(el.get("name"), None)
            return
        if not (tag.startswith("def") or tag.startswith("set")) or not tag.endswith("Vector"):
            return
        name = el.get("name")
        p = self.props.setdefault(name, {"state": None, "values": {}, "gen": 0, "kind": tag[3:]})
        p["gen"] += 1
        if el.get("state"):
            p["state"] = el.get("state")
        if el.get("message"):
            log("driver says (%s): %s" % (name, el.get("message")))
        for child in el:
            if tag == "setBLOBVector":
                data = base64.b64decode("".join((child.text or "").split()))
                fmt = child.get("format", "")
                if fmt.endswith(".z"):
                    data = zlib.decompress(data)
                    fmt = fmt[:-2]
                self.blobs.append((child.get("name"), fmt, data))
            else:
                p["values"][child.get("name")] = (child.text or "").strip()

    def pump(self, timeout):
        """Read and handle what arrives within timeout seconds."""
        r, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        if not r:
            return
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        if not data:
            raise Failure("indiserver closed the connection")
        self.parser.feed(data)
        for ev, el in self.parser.read_events():
            if ev == "start":
                if self.root is None:
                    self.root = el
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 1:          # a top-level message is complete
                    self._handle(el)
                    self.root.remove(el)

    def wait(self, cond, timeout, what):
        end = time.monotonic() + timeout
        while not cond():
            left = end - time.monotonic()
            if left <= 0:
                raise Failure("timed out after %.0f s waiting for %s" % (timeout, what))
            self.pump(min(left, 0.5))

    def prop(self, name):
        return self.props.get(name)

    def wait_defined(self, names, timeout):
        self.wait(lambda: all(n in self.props for n in names), timeout,
                  "the simulator to define %s (missing: %s)"
                  % (", ".join(names), ", ".join(n for n in names if n not in self.props)))

    def _request(self, kind, name, members, timeout):
        p = self.prop(name)
        if p is None:
            raise Failure("property %s.%s is not defined" % (DEVICE, name))
        gen0 = p["gen"]
        one = {"Number": "oneNumber", "Switch": "oneSwitch", "Text": "oneText"}[kind]
        body = "".join('<%s name="%s">%s</%s>' % (one, k, xml_escape(str(v)), one)
                       for k, v in members.items())
        self.send('<new%sVector device="%s" name="%s">%s</new%sVector>'
                  % (kind, DEVICE, name, body, kind))

        def done():
            q = self.prop(name)
            return q is not None and q["gen"] > gen0 and q["state"] != "Busy"
        self.wait(done, timeout, "%s.%s to take %s" % (DEVICE, name, members))
        q = self.prop(name)
        if q["state"] == "Alert":
            raise Failure("%s.%s = %s refused (state Alert); driver messages: %s"
                          % (DEVICE, name, members, " | ".join(self.messages[-3:])))

    def set_number(self, name, members, timeout=10):
        self._request("Number", name, members, timeout)

    def set_switch(self, name, on, timeout=10):
        self._request("Switch", name, {on: "On"}, timeout)

    def set_text(self, name, members, timeout=10):
        self._request("Text", name, members, timeout)


def xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---- FITS (just what the simulator writes) ---------------------------------

def read_fits(data):
    """Header dict and u16 image of a simulator frame (BITPIX 16, BZERO 32768)."""
    import numpy as np
    hdr, cards, off = {}, [], 0
    while True:
        block = data[off:off + 2880]
        if len(block) < 2880:
            raise Failure("truncated FITS header")
        off += 2880
        done = False
        for i in range(36):
            card = block[i * 80:(i + 1) * 80].decode("ascii", "replace")
            cards.append(card.rstrip())
            if card.startswith("END "):
                done = True
                break
            if card[8:10] == "= ":
                v = card[10:]
                if v.lstrip().startswith("'"):
                    v = v.lstrip()[1:].split("'")[0].rstrip()
                else:
                    v = v.split("/")[0].strip()
                hdr[card[:8].strip()] = v
        if done:
            break
    w, h, bp = int(hdr["NAXIS1"]), int(hdr["NAXIS2"]), int(hdr["BITPIX"])
    if bp != 16:
        raise Failure("expected BITPIX 16, got %d" % bp)
    raw = np.frombuffer(data[off:off + w * h * 2], dtype=">i2").reshape(h, w)
    img = raw.astype(np.int32) + int(float(hdr.get("BZERO", "0")))
    return hdr, [c for c in cards if c.strip()], img


# ---- truth and checks ------------------------------------------------------

def drawn(x, y):
    """The pixel the simulator centres a stamp on: C's int() truncation."""
    return int(x), int(y)


def field_truth(cfg, anchor, centre, n):
    """Drawn pixels of the stars and the mover for a frame whose centre
    (the simulator's gsc -c) is `centre`, at gsc call n."""
    ra0, dec0 = anchor
    stars = []
    for (x, y, mag) in skyfield.stars(cfg):
        ra, dec = skyfield.unproject(x, y, ra0, dec0, cfg)
        fx, fy = skyfield.project(ra, dec, centre[0], centre[1], cfg)
        stars.append((fx, fy, mag))
    mx, my = skyfield.mover_anchor_xy(n)
    mra, mdec = skyfield.unproject(mx, my, ra0, dec0, cfg)
    mover = skyfield.project(mra, mdec, centre[0], centre[1], cfg)
    return stars, mover


def whole_pixel_shift(stars, cfg):
    """(dx, dy) when every star's drawn pixel moved by the same whole
    pixels from the anchor frame (None otherwise), and the largest
    distance of an unrounded position from its half pixel."""
    moves, worst = set(), 0.0
    for (fx, fy, _), (ax, ay, _) in zip(stars, skyfield.stars(cfg)):
        if not (0 <= fx < cfg["width"] and 0 <= fy < cfg["height"]):
            continue
        px, py = drawn(fx, fy)
        moves.add((px - int(ax), py - int(ay)))
        worst = max(worst, abs(fx - px - 0.5), abs(fy - py - 0.5))
    return (moves.pop() if len(moves) == 1 else None), worst


def expected_peak(mag, exposure):
    """The simulator's stamp peak above the background: flux(mag) =
    10^((17 - mag) k / 2.5), k = 2.5 log10(65000) / 16, times the exposure
    and 1 + sqrt(gain), times the unit Gaussian's 1 / (sigma sqrt(2 pi))
    with sigma in arcsec (seeing 3.5 arcsec FWHM)."""
    import math
    k = 2.5 * math.log10(65000.0) / (17.0 - 1.0)
    flux = 10 ** ((17.0 - mag) * k / 2.5) * exposure * (1 + math.sqrt(GAIN))
    sigma = 3.5 / (2 * math.sqrt(2 * math.log(2)))
    return flux / (sigma * math.sqrt(2 * math.pi))


def centroid(img, x, y, r=3):
    """Background-subtracted centroid of the (2r+1)^2 box at x, y."""
    import numpy as np
    box = img[y - r:y + r + 1, x - r:x + r + 1].astype(float)
    box = box - np.median(img[y - 3 * r:y + 3 * r + 1, x - 3 * r:x + 3 * r + 1])
    box[box < 0] = 0
    s = box.sum()
    if s <= 0:
        return float("nan"), float("nan")
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    return x + (box * xx).sum() / s, y + (box * yy).sum() / s


def check_frame(k, img, stars, mover, cfg, exposure):
    """Find every star and the mover where the truth puts them."""
    import numpy as np
    h, w = img.shape
    if (w, h) != (cfg["width"], cfg["height"]):
        raise Failure("frame %d is %dx%d, expected %dx%d" % (k, w, h, cfg["width"], cfg["height"]))
    for i, (fx, fy, mag) in enumerate(stars + [(mover[0], mover[1], skyfield.MOVER_MAG)]):
        px, py = drawn(fx, fy)
        if not (8 <= px < w - 8 and 8 <= py < h - 8):
            continue
        what = "the mover" if i == len(stars) else "star %d (mag %.1f)" % (i + 1, mag)
        box = img[py - 5:py + 6, px - 5:px + 6]
        peak = expected_peak(mag, exposure)
        cx, cy = centroid(img, px, py)
        by, bx = np.unravel_index(np.argmax(box), box.shape)
        if img[py, px] < box.max() or img[py, px] < 0.5 * peak or not (
                abs(cx - px) < 0.5 and abs(cy - py) < 0.5):
            raise Failure(
                "frame %d: %s expected at pixel (%d, %d) with a peak near %.0f ADU; found value %d "
                "there, the 11x11 box's maximum %d at (%d, %d), centroid (%.2f, %.2f): the frame "
                "does not match tests/indi/skyfield.py's model of the simulator"
                % (k, what, px, py, peak, img[py, px], box.max(), px - 5 + bx, py - 5 + by, cx, cy))


def summarize(hdr, cards, img, stars, mover, exposure):
    """What a frame looks like (printed, and written to summary.txt)."""
    import numpy as np
    h, w = img.shape
    mask = np.ones_like(img, dtype=bool)
    for fx, fy, _ in stars + [(mover[0], mover[1], 0)]:
        px, py = drawn(fx, fy)
        mask[max(0, py - 12):py + 13, max(0, px - 12):px + 13] = False
    bg = img[mask]
    med = float(np.median(bg))
    mad = 1.4826 * float(np.median(np.abs(bg - med)))
    # sources: local maxima of a 5x5 window at least 20 sigma above the
    # median (sigma from the pixel std of the star-free area)
    sd = float(bg.std())
    from numpy.lib.stride_tricks import sliding_window_view
    pad = np.pad(img, 2, mode="edge")
    win = sliding_window_view(pad, (5, 5)).max(axis=(2, 3))
    peaks = np.argwhere((img == win) & (img > med + 20 * sd))
    fwhm = []
    peakvals = []
    for fx, fy, mag in stars:
        px, py = drawn(fx, fy)
        if not (10 <= px < w - 10 and 10 <= py < h - 10):
            continue
        peakvals.append(int(img[py, px]))
        if img[py, px] - med < 1000:      # faint stars: noise biases second moments
            continue
        box = img[py - 6:py + 7, px - 6:px + 7].astype(float) - med
        box[box < 0] = 0
        yy, xx = np.mgrid[-6:7, -6:7]
        s = box.sum()
        var = ((box * xx * xx).sum() / s + (box * yy * yy).sum() / s) / 2
        fwhm.append(2.3548 * var ** 0.5)
    lines = [
        "frame %dx%d, header: %s" % (w, h, ", ".join(
            "%s=%s" % (k, hdr[k]) for k in ("BITPIX", "BZERO", "ROWORDER", "DATE-OBS", "EXPTIME",
                                            "FOCALLEN", "SCALE", "RA", "DEC", "GAIN", "PIXSIZE1")
            if k in hdr)),
        "background (pixels 13 px or more from every source): median %.1f, mean %.2f, std %.2f, "
        "1.4826 MAD %.2f, min %d, max %d, distinct values %d"
        % (med, float(bg.mean()), sd, mad, int(bg.min()), int(bg.max()), len(np.unique(bg))),
        "sources found (5x5 local maxima > median + 20 std): %d (catalogue in frame: %d stars + mover)"
        % (len(peaks), len(peakvals)),
        "star peaks (ADU, with background): min %d, median %d, max %d; saturated (>= 65000) pixels: %d"
        % (min(peakvals), int(np.median(peakvals)), max(peakvals), int((img >= 65000).sum())),
        "star FWHM from second moments (stars peaking 1000 ADU or more): median %.2f px "
        "(%.2f..%.2f)"
        % (float(np.median(fwhm)), min(fwhm), max(fwhm)),
        "header keywords: %s" % " ".join(c[:8].strip() for c in cards if c[:8].strip()),
    ]
    return lines


# ---- the capture -------------------------------------------------------------

def jitter_offsets(n, amp, seed=4711):
    """Whole-pixel field moves, frame 0 unmoved, then random in [-amp, amp]
    per axis (deterministic)."""
    r = random.Random(seed)
    out = [(0, 0)]
    while len(out) < n:
        out.append((r.randint(-amp, amp), r.randint(-amp, amp)))
    return out


def read_calls(state):
    path = os.path.join(state, "calls.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [l.split() for l in f if l.strip()]


def capture(args):
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if (name.startswith("frame_") and ".fits" in name) or name in (
                "truth.txt", "summary.txt", "gsc-calls.log"):
            os.remove(os.path.join(args.out, name))
    state = tempfile.mkdtemp(prefix="skysieve-indi-")
    server = None
    client = None
    try:
        cfg = dict(skyfield.DEFAULTS)
        cfg["n_stars"] = args.stars
        with open(os.path.join(state, "config.json"), "w") as f:
            json.dump(cfg, f)
        env = dict(os.environ)
        env["PATH"] = HERE + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        env["SKYSIEVE_GSC_STATE"] = state
        # the driver reads and writes ~/.indi/<device>_config.xml: keep it
        # away from the user's, so that no saved setting changes the frames
        env["HOME"] = state
        server = Server(env, os.path.join(args.out, "indiserver.log"), args.port, args.unix)
        open(server.logpath, "wb").close()
        server.start(min(deadline, time.monotonic() + 20))
        client = Indi(server.port, min(deadline, time.monotonic() + 10))
        client.wait_defined(["CONNECTION"], 10)
        client.set_switch("CONNECTION", "CONNECT", timeout=15)
        need = ["SIMULATOR_SETTINGS", "SIM_FOCUSING", "CCD_GAIN", "CCD_OFFSET", "SCOPE_INFO",
                "EQUATORIAL_PE", "UPLOAD_MODE", "CCD_COMPRESSION", "CCD_TRANSFER_FORMAT",
                "CCD_FRAME_TYPE", "CCD_BINNING", "CCD_FRAME", "CCD_EXPOSURE", "POLLING_PERIOD"]
        client.wait_defined(need, 15)
        # Every setting that shapes the frames, explicitly (these are the
        # 1.9.9 defaults except the optics): a saved or changed default
        # must not change the field the truth describes.
        client.set_number("SIMULATOR_SETTINGS", {
            "SIM_XRES": cfg["width"], "SIM_YRES": cfg["height"],
            "SIM_XSIZE": cfg["pixel_um"], "SIM_YSIZE": cfg["pixel_um"],
            "SIM_MAXVAL": 65000, "SIM_SATURATION": 1, "SIM_LIMITINGMAG": 17, "SIM_NOISE": 10,
            "SIM_SKYGLOW": 19.5, "SIM_OAGOFFSET": 0, "SIM_POLAR": 0, "SIM_POLARDRIFT": 0,
            "SIM_PEPERIOD": 0, "SIM_PEMAX": 0, "SIM_TIME_FACTOR": 1, "SIM_ROTATION": 0})
        client.set_number("SIM_FOCUSING", {"SIM_SEEING": 3.5})
        client.set_number("CCD_GAIN", {"GAIN": GAIN})
        client.set_number("CCD_OFFSET", {"OFFSET": 0})
        # SCOPE_INFO: the focal length sets the pixel scale (aperture is
        # only written to the header); without it there is no telescope
        # to snoop and no scale.
        client.set_number("SCOPE_INFO", {"FOCAL_LENGTH": cfg["focal_mm"], "APERTURE": 100})
        # EQUATORIAL_PE: the pointing, used instead of a snooped mount
        # (no telescope driver runs)
        client.set_number("EQUATORIAL_PE", {"RA_PE": POINT_RA_H, "DEC_PE": POINT_DEC})
        client.set_switch("UPLOAD_MODE", "UPLOAD_CLIENT")
        client.set_switch("CCD_COMPRESSION", "INDI_DISABLED")
        client.set_switch("CCD_TRANSFER_FORMAT", "FORMAT_FITS")
        client.set_switch("CCD_FRAME_TYPE", "FRAME_LIGHT")
        client.set_number("CCD_BINNING", {"HOR_BIN": 1, "VER_BIN": 1})
        client.set_number("CCD_FRAME", {"X": 0, "Y": 0, "WIDTH": cfg["width"],
                                        "HEIGHT": cfg["height"]})
        client.set_number("POLLING_PERIOD", {"PERIOD_MS": POLL_MS})
        client.send('<enableBLOB device="%s">Also</enableBLOB>' % DEVICE)

        if args.ready_file:
            # the simulator is set up: say where it listens, then wait for
            # the go (another client, skysieved, connects meanwhile)
            part = args.ready_file + ".part"
            with open(part, "w") as f:
                f.write("%d %s\n" % (server.port, server.unix_name))
            os.replace(part, args.ready_file)
            log("ready: port %d; waiting for %s" % (server.port, args.go_file))
        if args.go_file:
            # (BLOBs another client triggers meanwhile are dropped unread)
            client.wait(lambda: client.blobs.clear() or os.path.exists(args.go_file),
                        max(1.0, deadline - time.monotonic()), "the go file %s" % args.go_file)
        if args.frames == 0:
            # set-up only: another client (skysieved in active mode) took
            # whatever exposures it wanted until the go file appeared
            client.blobs.clear()
            log("set-up only (--frames 0): done")
            return
        offsets = jitter_offsets(args.frames, args.jitter) if args.mode == "jitter" \
            else [(0, 0)] * args.frames
        anchor = None
        truth = []
        summary = None
        pointing0 = (POINT_RA_H, POINT_DEC)
        for k in range(args.frames):
            if time.monotonic() > deadline:
                raise Failure("overall timeout (%.0f s) after %d of %d frames"
                              % (args.timeout, k, args.frames))
            want = offsets[k]
            if k > 0 and args.mode == "jitter":
                # The centre that moves the anchor field by want: the sky
                # point that was at (centre - want) in the anchor frame.
                # The same J2000 change applied to the JNow pointing (their
                # difference, a 0.15 degree rotation, is 0.01 px here).
                cx, cy = skyfield.project(anchor[0], anchor[1], anchor[0], anchor[1], cfg)
                ra_t, dec_t = skyfield.unproject(cx - want[0], cy - want[1],
                                                 anchor[0], anchor[1], cfg)
                client.set_number("EQUATORIAL_PE", {
                    "RA_PE": "%.9f" % (pointing0[0] + (ra_t - anchor[0]) / 15.0),
                    "DEC_PE": "%.9f" % (pointing0[1] + (dec_t - anchor[1]))})
            nblobs = len(client.blobs)
            client.set_number("CCD_EXPOSURE", {"CCD_EXPOSURE_VALUE": args.exposure},
                              timeout=args.exposure + 20)
            client.wait(lambda: len(client.blobs) > nblobs, 20,
                        "frame %d's image (BLOB CCD1)" % k)
            name, fmt, data = client.blobs[-1]
            client.blobs.clear()
            if name != "CCD1" or fmt != ".fits":
                raise Failure("frame %d: got BLOB %s format %r, expected CCD1 .fits" % (k, name, fmt))
            calls = read_calls(state)
            if len(calls) != k + 1:
                raise Failure("frame %d: the simulator ran gsc %d times for %d frames (expected "
                              "one run per frame; the mover's truth counts on it)"
                              % (k, len(calls), k + 1))
            n, ra_c, dec_c = int(calls[-1][0]), float(calls[-1][1]), float(calls[-1][2])
            if int(calls[-1][7]) < len(skyfield.stars(cfg)) + 1:
                raise Failure("frame %d: gsc printed %s of %d objects (radius %s')"
                              % (k, calls[-1][7], len(skyfield.stars(cfg)) + 1, calls[-1][3]))
            if anchor is None:
                anchor = (ra_c, dec_c)
            stars, mover = field_truth(cfg, anchor, (ra_c, dec_c), n)
            move, worst = whole_pixel_shift(stars, cfg)
            if move is None or move != want:
                raise Failure("frame %d: the pointing (centre %.7f %+.7f) moved the field by %s, "
                              "wanted whole pixels %s (worst star %.3f px off its half pixel)"
                              % (k, ra_c, dec_c, move if move else "different amounts", want, worst))
            hdr, cards, img = read_fits(data)
            if hdr.get("ROWORDER", "TOP-DOWN") != "TOP-DOWN":
                raise Failure("frame %d: ROWORDER %r: truth.txt assumes TOP-DOWN"
                              % (k, hdr.get("ROWORDER")))
            check_frame(k, img, stars, mover, cfg, args.exposure)
            fname = "frame_%03d.fits" % k
            part = os.path.join(args.out, fname + ".part")
            with open(part, "wb") as f:
                f.write(data)
            os.replace(part, os.path.join(args.out, fname))
            mx, my = drawn(*mover)
            truth.append("%d %s %d %d %d %d %.3f %.3f"
                         % (k, fname, move[0], move[1], mx, my, mover[0], mover[1]))
            if summary is None:
                summary = summarize(hdr, cards, img, stars, mover, args.exposure)
            log("frame %d: %s, field moved (%+d, %+d), mover at (%d, %d)"
                % (k, fname, move[0], move[1], mx, my))
        shutil.copy(os.path.join(state, "calls.log"), os.path.join(args.out, "gsc-calls.log"))
        with open(os.path.join(args.out, "truth.txt"), "w") as f:
            f.write("# skysieve INDI capture (tests/indi/capture.py): indi_simulator_ccd frames\n"
                    "# mode %s frames %d width %d height %d exposure %g focal_mm %g pixel_um %g "
                    "jitter %d stars %d\n"
                    "# pixels: 0-based, x = column, y = row in file order (ROWORDER TOP-DOWN)\n"
                    "# dx dy: whole-pixel move of the star field since frame 0; mover_x mover_y: "
                    "the mover's stamp centre; mover_fx mover_fy: unrounded\n"
                    "# index file dx dy mover_x mover_y mover_fx mover_fy\n"
                    % (args.mode, args.frames, cfg["width"], cfg["height"], args.exposure,
                       cfg["focal_mm"], cfg["pixel_um"], args.jitter if args.mode == "jitter" else 0,
                       args.stars))
            f.write("\n".join(truth) + "\n")
        with open(os.path.join(args.out, "summary.txt"), "w") as f:
            f.write("frame 0 of %s:\n" % args.out + "\n".join(summary) + "\n")
        for line in summary:
            log(line)
        log("%d frames in %.1f s -> %s" % (args.frames, time.monotonic() - t0, args.out))
        if args.stop_file:
            # indiserver drops what it still holds for a client when it
            # stops: keep it up until the other clients have taken the frames
            log("waiting for %s before stopping the server" % args.stop_file)
            client.wait(lambda: client.blobs.clear() or os.path.exists(args.stop_file),
                        max(1.0, deadline - time.monotonic()), "the stop file %s" % args.stop_file)
    except Failure:
        if server is not None:
            log("indiserver log (last lines):\n%s" % server.log_tail())
        raise
    finally:
        # no signal may cut the clean-up short
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        shutil.rmtree(state, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for frame_NNN.fits and truth.txt")
    ap.add_argument("--frames", type=int, default=25,
                    help="exposures to take; 0 (with --go-file): set the simulator up, take "
                    "none, and serve other clients until the go file appears")
    ap.add_argument("--mode", choices=("static", "jitter"), default="static")
    ap.add_argument("--exposure", type=float, default=0.5, help="seconds")
    ap.add_argument("--jitter", type=int, default=4, help="largest whole-pixel move per axis")
    ap.add_argument("--stars", type=int, default=len(skyfield.STARS),
                    help="use the first N stars of skyfield.STARS (a sparser field)")
    ap.add_argument("--timeout", type=float, default=150, help="seconds for the whole capture")
    ap.add_argument("--port", type=int, default=0,
                    help="indiserver's TCP port (default: one the kernel reports free)")
    ap.add_argument("--unix", default="", help="indiserver's local socket name (-u)")
    ap.add_argument("--ready-file", default="",
                    help="once set up, write 'PORT UNIX' here (renamed into place)")
    ap.add_argument("--go-file", default="", help="wait for this file before the first exposure")
    ap.add_argument("--stop-file", default="",
                    help="after the frames, keep the server up until this file exists (other "
                    "clients still reading them)")
    args = ap.parse_args()
    if args.frames < 0 or (args.frames == 0 and not args.go_file) or not 0 < args.jitter <= 40 or args.exposure <= 0 or \
            not 1 <= args.stars <= len(skyfield.STARS):
        ap.error("bad --frames, --jitter, --exposure or --stars")

    missing = [p for p in ("indiserver", "indi_simulator_ccd") if shutil.which(p) is None]
    if importlib.util.find_spec("numpy") is None:
        missing.append("numpy for %s" % sys.executable)
    if missing:
        sys.stderr.write("capture: missing %s: install the Debian packages indi-bin and "
                         "python3-numpy (tools/install-deps.sh installs them)\n" % ", ".join(missing))
        return EXIT_MISSING

    def on_signal(signum, _frame):
        raise Failure("stopped by signal %d" % signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    _die_with_parent()   # when the test that runs us dies, stop (and clean up)
    try:
        capture(args)
    except Failure as e:
        sys.stderr.write("capture: FAILED: %s\n" % e)
        return EXIT_FAIL
    return 0


if __name__ == "__main__":
    sys.exit(main())
