"""skysieve_client — a Python client for skysieve's wire protocol, version 1.

The protocol is specified in proto/PROTOCOL.md. This module is a second,
independent implementation of it (it never loads skysieve's C code): it
needs pyzmq and numpy; astropy is optional (FITS output, WCS objects).

Receiving (what skysieved publishes)::

    from skysieve_client import Subscriber
    with Subscriber("tcp://127.0.0.1:5560", feed="cam1") as sub:
        for msg in sub:                      # Residual, Detections or Status
            if msg.type == "detections":
                for d in msg.detections:     # plain dicts, keys as on the wire
                    print(d["x"], d["y"], d["peak_snr"], d["kind"], d["track"])
            elif msg.type == "residual":
                img = msg.pixels             # numpy float32 (height, width), no copy

Tracks (detections linked across frames) come on their own topic::

    with Subscriber(endpoint, topics=("tracks.",), feed="cam1") as sub:
        for msg in sub:                      # Tracks
            for t in msg.tracks:             # dicts, keys as on the wire
                print(t["id"], t["state"], t["position"], t["velocity"])

Sending frames (driving skysieved from Python)::

    from skysieve_client import Sender
    with Sender("tcp://127.0.0.1:5559") as tx:       # PUSH, connect
        tx.series_start("night-1", frames=len(images))
        for seq, img in enumerate(images):
            tx.send_frame(img, seq=seq, mjd=t0 + seq * dt, exposure=2.0)
        tx.series_end("night-1", frames=len(images))

Control requests::

    from skysieve_client import control
    print(control("ipc:///run/skysieve/control", "stats"))

Every decoder validates like the C codec does, with the same error texts
(ProtocolError.reason / .text; tests/golden/malformed.json holds the
cases both implementations are tested against). Pixel parts are mapped
with numpy.frombuffer on the received ZeroMQ buffers (copy=False): the
arrays are read-only views that keep the message alive.
"""

import json
import os
import math
import re
import time as _time

import numpy as np
import zmq

__all__ = [
    "PROTOCOL_VERSION", "ProtocolError", "Limits",
    "Frame", "Series", "Residual", "Detections", "Tracks", "Status",
    "decode_input", "decode_output", "decode_request", "decode_response",
    "decode_status_body", "encode_frame", "encode_series",
    "mjd_to_iso", "iso_to_mjd", "Subscriber", "Sender", "control",
]

PROTOCOL_VERSION = 1
MAX_INT = 9007199254740992.0            # 2^53: larger counters lose digits in JSON
MJD_UNIX_EPOCH = 40587.0
MJD_MIN, MJD_MAX = 0.0, 200000.0
TIME_AGREE_S = 1e-3
WCS_MAX = 48
FITS_STRVAL_MAX = 68
NAME_MAX = 63                           # bytes of feed/series names
REASON_MAX = 159
INPUT_MAX = 255                         # bytes of an input's name (PROTOCOL.md §5 "input")
HISTORY_MAX = 256
MAX_FEEDS = 32
REQUEST_MAX = 4096          # bytes of a control request (PROTOCOL.md §8)

# wire dtype -> numpy dtype (little-endian); long names accepted on input
DTYPES = {"u8": "<u1", "u16": "<u2", "i16": "<i2", "i32": "<i4", "f32": "<f4"}
DTYPE_ALIASES = {"uint8": "u8", "uint16": "u16", "int16": "i16", "int32": "i32",
                 "float32": "f32"}
STATUS_NAMES = ("ok", "reference", "warmup", "regfail", "error")
KIND_NAMES = ("point", "streak", "cosmic")
TRACK_KINDS = ("point", "streak")
TRACK_STATES = ("active", "coasting", "ended")
TRACK_UNITS = ("px/s", "px/frame")
TRACK_POINTS = 32                       # positions a track carries at most (PROTOCOL.md §6a)
FLAG_NAMES = ("touches_invalid", "touches_edge")
REASONS = ("not_json", "not_object", "too_long", "missing_field", "wrong_type",
           "duplicate_field", "bad_value", "protocol_version", "unknown_type",
           "unknown_dtype", "dimensions", "bad_time", "bad_wcs", "meta_too_large",
           "data_size", "mask_size", "missing_part", "too_many_parts", "no_buffer",
           "bad_topic")
STAGES = ("upload", "calibrate", "reg_coarse", "reg_fine", "whiten", "guided", "noise",
          "matched", "detect", "history", "download")
COMMANDS = ("status", "stats", "reset", "reload", "config")
STAMPS_PARTS_TEXT = "a stamps message has a topic, a body and a pixel part"
# The residual's forms (PROTOCOL.md §5a): topic type -> pixel dtype
RESIDUAL_FORMS = {"residual": "f32", "residual16": "f16", "residual_every": "f32",
                  "residual16_every": "f16"}
RESIDUAL_PARTS_TEXT = ("a residual message has a topic, a header, a pixel part and an "
                       "optional mask part")
DETECTIONS_PARTS_TEXT = "a detections message has a topic and a body"
TRACKS_PARTS_TEXT = "a tracks message has a topic and a body"
STATUS_PARTS_TEXT = "a status message has a topic and a body"
DETECTIONS_BODY_MAX = 64 << 20         # a detections body may pass the header cap by this


class ProtocolError(ValueError):
    """A message that does not follow PROTOCOL.md. reason is the counter
    name ("missing_field", ...), text the documented error text."""

    def __init__(self, reason, text):
        super().__init__(text)
        self.reason = reason
        self.text = text


class Limits:
    """What a receiver accepts (the C side's ss_proto_limits_t)."""

    def __init__(self, max_width=16384, max_height=16384, max_header_bytes=65536,
                 max_meta_bytes=4095):
        self.max_width = max_width
        self.max_height = max_height
        self.max_header_bytes = max_header_bytes
        self.max_meta_bytes = max_meta_bytes


# ---- time --------------------------------------------------------------------

def _days_from_civil(y, m, d):
    # proleptic Gregorian day count from 1970-01-01 (as the C side computes it,
    # including its lenience about day 31 of short months)
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


# PROTOCOL.md §2 "Time", the grammar ss_iso_to_mjd reads too: digits only
# (ASCII), two per field, an optional fraction of at least one digit.
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})"
                  r"(?:[T ](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)Z?)?", re.ASCII)


def iso_to_mjd(text):
    """MJD (UTC) of "YYYY-MM-DDThh:mm:ss[.fff][Z]" or "YYYY-MM-DD"; None if
    the text is not such a time."""
    m = _ISO.fullmatch(text) if isinstance(text, str) else None
    if not m:
        return None
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    hh = int(m.group(4) or 0)
    mi = int(m.group(5) or 0)
    ss = float(m.group(6) or 0.0)
    if not (1 <= mo <= 12 and 1 <= d <= 31 and 0 <= hh <= 23 and 0 <= mi <= 59
            and 0.0 <= ss < 61.0):
        return None
    return _days_from_civil(y, mo, d) + MJD_UNIX_EPOCH + (hh * 3600.0 + mi * 60.0 + ss) / 86400.0


def mjd_to_iso(mjd):
    """ISO-8601 UTC with milliseconds, as the C side writes it."""
    u = (mjd - MJD_UNIX_EPOCH) * 86400.0
    secs = math.floor(u)
    ms = int(round((u - secs) * 1000.0))
    if ms >= 1000:
        ms -= 1000
        secs += 1
    t = _time.gmtime(secs)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour,
                                                    t.tm_min, t.tm_sec, ms)


def residual_file_name(directory, feed, seq, time=None, ext=".fits", k=0):
    """The one naming rule for residual files, as skysieved's FITS sink and
    skysieve-sub write them (ss_residual_file_name): DIR/<feed>-<seq, 10
    digits>[-<time as yyyymmddThhmmss.sssZ>][-k]<ext>; time is the
    message's "time" (start of exposure, ISO 8601 UTC) or None; k > 0 for
    the k-th name when the others exist (a file is never overwritten)."""
    stamp = "-" + time.replace("-", "").replace(":", "") if time else ""
    twin = "-%d" % k if k > 0 else ""
    return os.path.join(directory, "%s-%010d%s%s%s" % (feed, seq, stamp, twin, ext))


def free_residual_file_name(directory, feed, seq, time=None, ext=".fits"):
    """residual_file_name with the first k whose file does not exist."""
    k = 0
    while os.path.exists(residual_file_name(directory, feed, seq, time, ext, k)):
        k += 1
    return residual_file_name(directory, feed, seq, time, ext, k)


def now_mjd():
    return _time.time() / 86400.0 + MJD_UNIX_EPOCH


# ---- JSON parsing with the C codec's rules ---------------------------------

class _Obj(dict):
    """A JSON object that remembers members given more than once (the first
    value is kept, as cJSON's lookup does)."""

    def __init__(self, pairs):
        super().__init__()
        self.npairs = len(pairs)
        self.dups = set()
        for k, v in pairs:
            if k in self:
                self.dups.add(k)
            else:
                self[k] = v


def _reject_constant(name):
    raise ValueError("not JSON: " + name)


_DECODER = json.JSONDecoder(object_pairs_hook=_Obj, parse_constant=_reject_constant)
_WS = " \t\n\r"


def _kind(v):
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    return "an invalid value"


def _hex4(b, i):
    """The 4 hex digits of b at i as an int, or None."""
    t = b[i:i + 4]
    if len(t) < 4 or any(c not in b"0123456789abcdefABCDEF" for c in t):
        return None
    return int(t, 16)


def _strict_violation(b, n):
    """The first position in b[:n] of what JSON or PROTOCOL.md §2 forbids and
    a lenient parser lets through — a raw control character in a string, a
    number with a leading zero (the digit after it), \\u0000 or a surrogate
    escape that is not a high-low pair (the backslash) — or None. The C
    codec's json_strict_violation, scan for scan."""
    b = b[:n]
    in_str = False
    i = 0
    while i < n:
        c = b[i]
        if in_str:
            if c == 0x22:
                in_str = False
            elif c < 0x20:
                return i
            elif c == 0x5C and i + 1 < n and b[i + 1] == 0x75:
                v = _hex4(b, i + 2)
                if v is None:
                    i += 2
                    continue
                if v == 0 or 0xDC00 <= v <= 0xDFFF:
                    return i
                if 0xD800 <= v <= 0xDBFF:
                    w = _hex4(b, i + 8) if i + 7 < n and b[i + 6] == 0x5C and b[i + 7] == 0x75 \
                        else None
                    if w is None or not 0xDC00 <= w <= 0xDFFF:
                        return i
                    i += 12
                else:
                    i += 6
                continue
            elif c == 0x5C:
                i += 1
        elif c == 0x22:
            in_str = True
        elif (c == 0x2D or 0x30 <= c <= 0x39) and not (i > 0 and b[i - 1] in _NUMBER_CHARS):
            j = i + (c == 0x2D)
            if j + 1 < n and b[j] == 0x30 and 0x30 <= b[j + 1] <= 0x39:
                return j + 1
        i += 1
    return None


_NUMBER_CHARS = frozenset(b"0123456789.eE+-")


def _parse_object(data, max_len, what):
    data = bytes(data)
    n = len(data)
    if n > max_len:
        raise ProtocolError("too_long", "%s too long: %d bytes (maximum %d)" % (what, n, max_len))

    def not_json(pos):
        # the parser's "gave up here" position, clamped into the text as cJSON does
        if n == 0:
            pos = 0
        elif pos >= n:
            pos = n - 1
        return ProtocolError("not_json", "%s is not valid JSON (error at byte %d)" % (what, pos))

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_json(e.start)
    i = 0
    while i < len(text) and text[i] in _WS:
        i += 1
    at = None                   # the parser's error, or what follows the value
    try:
        value, end = _DECODER.raw_decode(text, i)
        for j in range(end, len(text)):
            if text[j] not in _WS:
                at = len(text[:j].encode("utf-8"))
                break
    except json.JSONDecodeError as e:
        at = len(text[:e.pos].encode("utf-8"))
    except ValueError:
        at = i
    v = _strict_violation(data, n if at is None else at)
    if v is not None:
        raise not_json(v)
    if at is not None:
        raise not_json(at)
    if not isinstance(value, dict):
        raise ProtocolError("not_object", "%s is not a JSON object (got %s)" % (what, _kind(value)))
    return value


class _Ctx:
    """Field access with the C codec's checks and texts; prefix names the
    path of nested fields ("shift.", "detections[3].")."""

    def __init__(self, obj, prefix=""):
        self.obj = obj
        self.prefix = prefix

    def fail(self, reason, text):
        raise ProtocolError(reason, text)

    def get(self, name, required):
        if name in getattr(self.obj, "dups", ()):
            self.fail("duplicate_field", 'duplicate field "%s%s"' % (self.prefix, name))
        if name not in self.obj:
            if required:
                self.fail("missing_field", 'missing field "%s%s"' % (self.prefix, name))
            return False, None
        return True, self.obj[name]

    def wrong_type(self, name, expected, v):
        self.fail("wrong_type", 'field "%s%s" has the wrong type: expected %s, got %s'
                  % (self.prefix, name, expected, _kind(v)))

    def int(self, name, required, lo=-MAX_INT, hi=MAX_INT, range_text="an integer",
            default=None):
        ok, v = self.get(name, required)
        if not ok:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.wrong_type(name, "an integer", v)
        f = float(v)
        if not math.isfinite(f) or not f.is_integer():
            self.fail("wrong_type", 'field "%s%s" has the wrong type: expected an integer, got %.17g'
                      % (self.prefix, name, f))
        if f < lo or f > hi:
            self.fail("bad_value", 'field "%s%s" is out of range: %.17g (expected %s)'
                      % (self.prefix, name, f, range_text))
        return int(f)

    def u64(self, name, required, default=0):
        return self.int(name, required, 0, MAX_INT, "0 to 2^53", default)

    def num(self, name, required, nullable=False, default=None):
        ok, v = self.get(name, required)
        if not ok:
            return default
        if nullable and v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.wrong_type(name, "a number or null" if nullable else "a number", v)
        f = float(v)
        if not math.isfinite(f):
            self.fail("bad_value", 'field "%s%s" is out of range: %g (expected a finite number)'
                      % (self.prefix, name, f))
        return f

    def bool(self, name, required, default=False):
        ok, v = self.get(name, required)
        if not ok:
            return default
        if not isinstance(v, bool):
            self.wrong_type(name, "a boolean", v)
        return v

    def str(self, name, required, chars="any", cap=NAME_MAX, default=""):
        ok, v = self.get(name, required)
        if not ok:
            return default
        if not isinstance(v, str):
            self.wrong_type(name, "a string", v)
        n = len(v.encode("utf-8"))
        if n > cap:
            self.fail("bad_value", 'field "%s%s" is too long: %d bytes (maximum %d)'
                      % (self.prefix, name, n, cap))
        if chars == "name" and not re.fullmatch(r"[A-Za-z0-9_.\-]*", v):
            self.fail("bad_value", 'field "%s%s" has a character outside A-Z a-z 0-9 _ - .: "%s"'
                      % (self.prefix, name, v))
        if chars == "printable" and not re.fullmatch(r"[\x20-\x7e]*", v):
            self.fail("bad_value", 'field "%s%s" has a character outside printable ASCII: "%s"'
                      % (self.prefix, name, v))
        return v

    def typed(self, name, required, want_object):
        ok, v = self.get(name, required)
        if not ok:
            return None
        if want_object and not isinstance(v, dict):
            self.wrong_type(name, "an object", v)
        if not want_object and not isinstance(v, list):
            self.wrong_type(name, "an array", v)
        return v

    def version(self):
        v = self.int("protocol", True)
        if v != PROTOCOL_VERSION:
            self.fail("protocol_version",
                      "unsupported protocol version %d (this receiver speaks version %d)"
                      % (v, PROTOCOL_VERSION))

    def type(self, want):
        t = self.str("type", True)
        if t != want:
            self.fail("unknown_type", 'unknown message type "%s" (expected %s)' % (t, want))

    def time_pair(self, iso_key="time", mjd_key="mjd", required=False, nullable=False):
        p = self.prefix
        rt, t = self.get(iso_key, False)
        m = self.num(mjd_key, False, nullable)
        rm = mjd_key in self.obj
        from_iso = None
        if rt:
            if nullable and t is None:
                from_iso = None
            elif not isinstance(t, str):
                self.wrong_type(iso_key, "a string or null" if nullable else "a string", t)
            else:
                from_iso = iso_to_mjd(t)
                if from_iso is None:
                    self.fail("bad_time", 'field "%s%s" is not an ISO-8601 UTC time: "%s"'
                              % (p, iso_key, t[:80]))
        if not rt and not rm:
            if required:
                self.fail("missing_field", 'missing field "%s%s" (or "%s%s")'
                          % (p, iso_key, p, mjd_key))
            return None
        if rt and rm:
            if (from_iso is None) != (m is None):
                self.fail("bad_time", 'fields "%s%s" and "%s%s" disagree (one is null)'
                          % (p, iso_key, p, mjd_key))
            if m is not None and abs(from_iso - m) * 86400.0 > TIME_AGREE_S + 1e-6:
                self.fail("bad_time", 'fields "%s%s" and "%s%s" disagree by %.3f s'
                          % (p, iso_key, p, mjd_key, abs(from_iso - m) * 86400.0))
        v = m if rm else from_iso
        if v is not None and not (MJD_MIN <= v < MJD_MAX):
            self.fail("bad_time", 'field "%s%s" is out of range: MJD %.6f (expected 0 to 200000)'
                      % (p, mjd_key if rm else iso_key, v))
        return v

    def wcs(self):
        o = self.typed("wcs", False, True)
        if o is None:
            return {}
        if o.npairs > WCS_MAX:
            self.fail("bad_wcs", "too many wcs keywords: %d (maximum %d)" % (o.npairs, WCS_MAX))
        out = {}
        for k, v in o.items():
            if not re.fullmatch(r"[A-Z0-9_\-]{1,8}", k):
                self.fail("bad_wcs", 'wcs keyword "%s" is not a FITS keyword '
                          '(1 to 8 characters of A-Z 0-9 _ -)' % k[:40])
            if k in o.dups:
                self.fail("bad_wcs", 'duplicate wcs keyword "%s"' % k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if not math.isfinite(v):
                    self.fail("bad_wcs", 'wcs value of "%s" is not finite' % k)
                out[k] = float(v)
            elif isinstance(v, str):
                if len(v.encode("utf-8")) > FITS_STRVAL_MAX:
                    self.fail("bad_wcs", 'wcs value of "%s" is too long: %d characters (maximum %d)'
                              % (k, len(v.encode("utf-8")), FITS_STRVAL_MAX))
                if not re.fullmatch(r"[\x20-\x7e]*", v):
                    self.fail("bad_wcs", 'wcs value of "%s" has a character outside printable ASCII'
                              % k)
                out[k] = v
            else:
                self.fail("bad_wcs", 'wcs value of "%s" has the wrong type: expected a number or '
                          'a string, got %s' % (k, _kind(v)))
        return out

    def meta(self, max_bytes):
        o = self.typed("meta", False, True)
        if o is None:
            return {}
        max_bytes = min(max_bytes, 4095)
        n = len(json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        if n > max_bytes:
            self.fail("meta_too_large", 'field "meta" is too large: %d bytes as compact JSON '
                      '(maximum %d)' % (n, max_bytes))
        return dict(o)


def _ctx(obj, parent, name, index=None):
    return _Ctx(obj, "%s%s%s." % (parent, name, "" if index is None else "[%d]" % index))


def _readonly(a):
    # views on received messages are not for writing (pyzmq's buffers are
    # writable, but the message may be shared); np.array(a) gives a copy
    a.flags.writeable = False
    return a


def _part_bytes(p):
    """bytes-like view of a part: bytes, bytearray, memoryview or zmq.Frame."""
    if isinstance(p, zmq.Frame):
        return p.buffer
    return memoryview(p)


# ---- decoded messages -------------------------------------------------------

class _Msg:
    def __repr__(self):
        keys = ("type", "feed", "series", "seq", "status")
        return "<%s %s>" % (type(self).__name__, " ".join(
            "%s=%r" % (k, getattr(self, k)) for k in keys if hasattr(self, k)))


class Frame(_Msg):
    """An input frame: header fields, pixels (height, width) in the sender's
    dtype (a read-only view of the pixel part), mask (uint8 0/1) or None."""
    type = "frame"


class Series(_Msg):
    """series_start / series_end."""


class Residual(_Msg):
    """A residual: header fields, pixels (height, width) float32 with NaN for
    invalid pixels (a read-only view of the received buffer: no copy), mask
    (uint8 0/1, same shape) or None, and header: the JSON header as sent."""
    type = "residual"

    def to_fits(self, path, overwrite=True):
        """Write the residual as a FITS image (needs astropy)."""
        from astropy.io import fits  # optional dependency
        h = fits.Header()
        h["SEQ"] = self.seq
        if self.time:
            h["DATE-OBS"] = self.time[:-1] if self.time.endswith("Z") else self.time
            h["MJD-OBS"] = self.mjd
        h["EXPTIME"] = self.exposure
        if self.shift:
            h["SHIFTX"], h["SHIFTY"] = self.shift["x"], self.shift["y"]
        if self.sigma == self.sigma:
            h["SIGMA"] = self.sigma
        h["STATUS"] = self.status
        for k, v in self.wcs.items():
            h[k] = v
        fits.PrimaryHDU(np.asarray(self.pixels), header=h).writeto(path, overwrite=overwrite,
                                                                   checksum=True)

    def wcs_object(self):
        """An astropy.wcs.WCS from the header's WCS keywords (needs astropy)."""
        from astropy.wcs import WCS  # optional dependency
        return WCS(dict(self.wcs, NAXIS=2, NAXIS1=self.width, NAXIS2=self.height))


class Stamps(_Msg):
    """A stamps message (PROTOCOL.md §5b): header fields (as a detections
    message has them), count, truncated, origin [x, y] and stamps, a list of
    dicts with the wire's keys (det, kind, x, y, x0, y0, w, h; x0/y0 in
    input-frame pixels) and "pixels": (h, w) float32, NaN = invalid, a
    read-only view of the received pixel part (no copy)."""
    type = "stamps"


class Detections(_Msg):
    """A detections message: header fields and detections, a list of dicts
    with the wire's keys ("ends" filled with the centroid for non-streaks,
    "ra"/"dec" None when no WCS was known, "mag"/"mag_err" None when no
    zero point was)."""
    type = "detections"


class Tracks(_Msg):
    """A tracks message: header fields (as a detections message has them),
    count, truncated and tracks, a list of dicts with the wire's keys
    ("time" of first/last derived from their "mjd"; "rate" and "pa", "mag"
    and "mag_err" None when not known)."""
    type = "tracks"


class Status(_Msg):
    """The daemon's periodic status: version, mjd, uptime_s, feeds (dicts)."""
    type = "status"


# ---- input messages (frame, series_start, series_end) -----------------------

def _input_header(data, limits):
    obj = _parse_object(data, limits.max_header_bytes, "header")
    c = _Ctx(obj)
    c.version()
    t = c.str("type", True)
    if t == "frame":
        m = Frame()
        m.header = obj
        m.seq = c.u64("seq", True)
        m.mjd = c.time_pair(required=True)
        w = c.int("width", True)
        if w < 1 or w > limits.max_width:
            c.fail("dimensions", "width %d is out of range (1 to %d)" % (w, limits.max_width))
        h = c.int("height", True)
        if h < 1 or h > limits.max_height:
            c.fail("dimensions", "height %d is out of range (1 to %d)" % (h, limits.max_height))
        m.width, m.height = w, h
        dt = c.str("dtype", True)
        m.dtype = DTYPE_ALIASES.get(dt, dt)
        if m.dtype not in DTYPES:
            c.fail("unknown_dtype", 'unknown dtype "%s" (expected u8, u16, i16, i32 or f32)' % dt)
        m.exposure = c.num("exposure", False, default=0.0)
        if m.exposure < 0:
            c.fail("bad_value", 'field "exposure" is out of range: %g (expected a number >= 0)'
                   % m.exposure)
        m.feed = c.str("feed", False, "name")
        m.series = c.str("series", False, "printable")
        m.wcs = c.wcs()
        m.meta = c.meta(limits.max_meta_bytes)
        m.frames = None
        return m
    if t in ("series_start", "series_end"):
        m = Series()
        m.type = t
        m.header = obj
        m.series = c.str("series", True, "printable")
        if not m.series:
            c.fail("bad_value", 'field "series" is empty')
        m.feed = c.str("feed", False, "name")
        m.mjd = c.time_pair()
        m.frames = c.int("frames", False, 0, MAX_INT, "0 to 2^53")
        m.meta = c.meta(limits.max_meta_bytes)
        return m
    c.fail("unknown_type",
           'unknown message type "%s" (expected frame, series_start or series_end)' % t)


def decode_input(parts, limits=None):
    """Decode an input message (what a sender sends to skysieved): a list
    of parts (bytes, memoryviews or zmq.Frames), the header first. Returns a
    Frame or a Series; raises ProtocolError with the documented text."""
    limits = limits or Limits()
    if not parts:
        raise ProtocolError("missing_part", "empty message (no header part)")
    m = _input_header(_part_bytes(parts[0]), limits)
    n = len(parts)
    if m.type != "frame":
        if n > 1:
            raise ProtocolError("too_many_parts", "too many parts: %d (a %s message has 1)"
                                % (n, m.type))
        return m
    if n < 2:
        raise ProtocolError("missing_part", "missing pixel part (a frame has a header part, a "
                            "pixel part and an optional mask part)")
    if n > 3:
        raise ProtocolError("too_many_parts",
                            "too many parts: %d (a frame has at most 3: header, pixels, mask)" % n)
    dt = np.dtype(DTYPES[m.dtype])
    want = m.width * m.height * dt.itemsize
    data = _part_bytes(parts[1])
    if data.nbytes != want:
        raise ProtocolError("data_size", "pixel part is %d bytes; the header says %d x %d %s = %d "
                            "bytes" % (data.nbytes, m.width, m.height, m.dtype, want))
    npix = m.width * m.height
    m.mask = None
    if n == 3:
        mb = _part_bytes(parts[2])
        if mb.nbytes != npix:
            raise ProtocolError("mask_size", "mask part is %d bytes; the header says %d x %d = %d "
                                "bytes" % (mb.nbytes, m.width, m.height, npix))
        mask = np.frombuffer(mb, dtype=np.uint8)
        bad = np.flatnonzero(mask > 1)
        if bad.size:
            i = int(bad[0])
            raise ProtocolError("bad_value", "mask part has value %d at pixel (%d, %d) (expected 0 "
                                "or 1)" % (mask[i], i % m.width, i // m.width))
        m.mask = mask.reshape(m.height, m.width)
    m.pixels = _readonly(np.frombuffer(data, dtype=dt).reshape(m.height, m.width))
    if m.mask is not None:
        m.mask = _readonly(m.mask)
    return m


# ---- output messages (residual, detections, tracks, status) -----------------

def _topic_of(part):
    t = bytes(_part_bytes(part))
    return t.decode("utf-8", "replace")


def _check_topic(topic, want_type, feed):
    expect = "status" if want_type == "status" else "%s.%s" % (want_type, feed)
    if topic != expect:
        shown = "".join(ch if 0x20 <= ord(ch) < 0x7f else "?" for ch in topic[:79])
        raise ProtocolError("bad_topic", 'topic "%s" does not match the body (expected "%s")'
                            % (shown, expect))


def _parts_count(n, lo, hi, what):
    if n < lo:
        raise ProtocolError("missing_part", "missing part: %d of %d (%s)" % (n, lo, what))
    if n > hi:
        raise ProtocolError("too_many_parts", "too many parts: %d (%s)" % (n, what))


def _result_common(c, limits, m, kind):
    c.version()
    c.type(kind)
    m.feed = c.str("feed", True, "name")
    if not m.feed:
        c.fail("bad_value", 'field "feed" is empty')
    m.series = c.str("series", False, "printable")
    m.seq = c.u64("seq", True)
    m.input = c.str("input", False, cap=INPUT_MAX)
    m.topic_seq = c.u64("topic_seq", False, default=None)
    m.mjd = c.time_pair(required=True, nullable=True)
    m.time = mjd_to_iso(m.mjd) if m.mjd is not None else None
    m.exposure = c.num("exposure", False, default=0.0)
    if m.exposure < 0:
        c.fail("bad_value", 'field "exposure" is out of range: %g (expected a number >= 0)'
               % m.exposure)
    wmin = 1 if kind == "residual" else 0
    w = c.int("width", True)
    if w < wmin or w > limits.max_width:
        c.fail("dimensions", "width %d is out of range (%d to %d)" % (w, wmin, limits.max_width))
    h = c.int("height", True)
    if h < wmin or h > limits.max_height:
        c.fail("dimensions", "height %d is out of range (%d to %d)" % (h, wmin, limits.max_height))
    m.width, m.height = w, h
    m.status = c.str("status", True)
    if m.status not in STATUS_NAMES:
        c.fail("bad_value", 'field "status" is "%s" (expected ok, reference, warmup, regfail or '
               'error)' % m.status)
    m.reason = c.str("reason", False, cap=REASON_MAX)
    ok, s = c.get("shift", True)
    if s is None:
        m.shift = None
    elif not isinstance(s, dict):
        c.wrong_type("shift", "an object or null", s)
    else:
        sc = _ctx(s, c.prefix, "shift")
        m.shift = {k: sc.num(k, True, True) for k in ("x", "y", "err_x", "err_y", "cov_xy")}
    sigma = c.num("sigma", True, True)
    m.sigma = float("nan") if sigma is None else sigma
    m.history_len = c.int("history_len", True, 0, HISTORY_MAX, "0 to 256")
    m.rereferenced = c.bool("rereferenced", False)
    m.history_reset = c.bool("history_reset", False)
    m.meta = c.meta(limits.max_meta_bytes)
    m.mjd_mid = m.header.get("mjd_mid")


def _decode_residual(parts, limits, form="residual"):
    """A residual message of form (a key of RESIDUAL_FORMS: its topic type):
    pixels float32, or float16 for the residual16 forms."""
    _parts_count(len(parts), 3, 4, RESIDUAL_PARTS_TEXT)
    obj = _parse_object(_part_bytes(parts[1]), limits.max_header_bytes, "header")
    c = _Ctx(obj)
    m = Residual()
    m.header = obj
    _result_common(c, limits, m, "residual")
    dt = c.str("dtype", True)
    want = RESIDUAL_FORMS[form]
    if want == "f32" and DTYPE_ALIASES.get(dt, dt) != "f32":
        c.fail("unknown_dtype", 'unknown dtype "%s" (a residual is f32)' % dt)
    if want == "f16" and dt != "f16":
        c.fail("unknown_dtype", 'unknown dtype "%s" (a %s message is f16)' % (dt, form))
    m.dtype = want
    m.form = form
    m.every = c.int("every", False, 1, MAX_INT, "1 to 2^53", None) if "every" in form else None
    wl = c.typed("weights", True, False)
    if len(wl) > HISTORY_MAX:
        c.fail("bad_value", 'field "weights" has %d entries (maximum %d)' % (len(wl), HISTORY_MAX))
    m.weights = []
    for k, v in enumerate(wl):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            c.fail("wrong_type", 'field "weights[%d]" has the wrong type: expected a number, got %s'
                   % (k, _kind(v)))
        m.weights.append(float("nan") if v is None else float(v))
    m.wcs = c.wcs()
    m.topic = _topic_of(parts[0])
    _check_topic(m.topic, form, m.feed)
    npix = m.width * m.height
    size = 4 if want == "f32" else 2
    data = _part_bytes(parts[2])
    if data.nbytes != npix * size:
        raise ProtocolError("data_size", "pixel part is %d bytes; the header says %d x %d %s = %d "
                            "bytes" % (data.nbytes, m.width, m.height, want, npix * size))
    m.mask = None
    if len(parts) == 4:
        mb = _part_bytes(parts[3])
        if mb.nbytes != npix:
            raise ProtocolError("mask_size", "mask part is %d bytes; the header says %d x %d = %d "
                                "bytes" % (mb.nbytes, m.width, m.height, npix))
        mask = np.frombuffer(mb, dtype=np.uint8)
        bad = np.flatnonzero(mask > 1)
        if bad.size:
            i = int(bad[0])
            raise ProtocolError("bad_value", "mask part has value %d at pixel (%d, %d) (expected 0 "
                                "or 1)" % (mask[i], i % m.width, i // m.width))
        m.mask = mask.reshape(m.height, m.width)
    # the zero-copy step: a numpy view on the ZeroMQ message buffer
    m.pixels = _readonly(np.frombuffer(data, dtype="<f4" if want == "f32" else "<f2")
                         .reshape(m.height, m.width))
    if m.mask is not None:
        m.mask = _readonly(m.mask)
    return m


def _detection(c):
    d = {}
    d["x"] = c.num("x", True)
    d["y"] = c.num("y", True)
    for k in ("flux", "flux_err", "peak_snr"):
        d[k] = c.num(k, True, True)
    d["peak_x"] = c.int("peak_x", True, -2147483648.0, 2147483647.0, "a 32-bit integer")
    d["peak_y"] = c.int("peak_y", True, -2147483648.0, 2147483647.0, "a 32-bit integer")
    d["area"] = c.int("area", True, 0, 2147483647.0, "0 to 2^31-1")
    bb = c.typed("bbox", True, False)
    if (len(bb) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, float))
                            or not float(v).is_integer() or abs(v) > 2147483647 for v in bb)):
        c.fail("wrong_type", 'field "%sbbox" has the wrong type: expected 4 integers '
               '[x0, y0, x1, y1]' % c.prefix)
    d["bbox"] = [int(v) for v in bb]
    for k in ("a", "b", "theta"):
        d[k] = c.num(k, True, True)
    d["kind"] = c.str("kind", True)
    if d["kind"] not in KIND_NAMES:
        c.fail("bad_value", 'field "%skind" is "%s" (expected point, streak or cosmic)'
               % (c.prefix, d["kind"]))
    d["sign"] = c.int("sign", True, -1, 1, "-1 or 1")
    if d["sign"] == 0:
        c.fail("bad_value", 'field "%ssign" is out of range: 0 (expected -1 or 1)' % c.prefix)
    ends = c.typed("ends", False, False)
    if ends is None:
        d["ends"] = [[d["x"], d["y"]], [d["x"], d["y"]]]
    else:
        good = len(ends) == 2 and all(
            isinstance(p, list) and len(p) == 2 and all(
                not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
                for v in p) for p in ends)
        if not good:
            c.fail("wrong_type", 'field "%sends" has the wrong type: expected [[x0, y0], [x1, y1]]'
                   % c.prefix)
        d["ends"] = [[float(v) for v in p] for p in ends]
    d["peak_fraction"] = c.num("peak_fraction", False, True)
    fl = c.typed("flags", False, False) or []
    for v in fl:
        if not isinstance(v, str):
            c.fail("wrong_type", 'field "%sflags" has the wrong type: expected an array of strings'
                   % c.prefix)
    # flags this version does not know are ignored (compatibility rule)
    d["flags"] = [f for f in FLAG_NAMES if f in fl]
    d["label"] = c.int("label", False, -2147483647.0, 2147483647.0, "a 32-bit integer", 0)
    d["track"] = c.u64("track", False)
    ra = c.num("ra", False)
    dec = c.num("dec", False)
    if ("ra" in c.obj) != ("dec" in c.obj):
        c.fail("missing_field", 'missing field "%s%s" (ra and dec go together)'
               % (c.prefix, "dec" if "ra" in c.obj else "ra"))
    d["ra"], d["dec"] = ra, dec
    d["mag"], d["mag_err"] = _mag(c)
    return d


def _mag(c):
    """"mag" and "mag_err" (PROTOCOL.md §6): optional, together, the error
    not negative; (None, None) when absent."""
    mag = c.num("mag", False)
    err = c.num("mag_err", False)
    if ("mag" in c.obj) != ("mag_err" in c.obj):
        c.fail("missing_field", 'missing field "%s%s" (mag and mag_err go together)'
               % (c.prefix, "mag_err" if "mag" in c.obj else "mag"))
    if err is not None and err < 0:
        c.fail("bad_value", 'field "%smag_err" is out of range: %g (expected a number >= 0)'
               % (c.prefix, err))
    return mag, err


def _decode_list(parts, limits, m, name, parts_text, entry, n_parts=2):
    """A detections, tracks or stamps message into m: the result's header
    members, count, truncated and the list (entry decodes one of its
    objects). n_parts: the message's parts (parts holds the first two)."""
    if n_parts == 2:
        _parts_count(len(parts), 2, 2, parts_text)
    cap = limits.max_header_bytes + DETECTIONS_BODY_MAX
    obj = _parse_object(_part_bytes(parts[1]), cap, "body")
    c = _Ctx(obj)
    m.header = obj
    _result_common(c, limits, m, m.type)
    m.count = c.int("count", True, 0, MAX_INT, "0 to 2^53")
    m.truncated = c.int("truncated", False, 0, MAX_INT, "0 to 2^53", 0)
    lst = c.typed(name, True, False)
    if m.count != len(lst):
        c.fail("bad_value", 'field "count" is %d but "%s" has %d entries'
               % (m.count, name, len(lst)))
    m.topic = _topic_of(parts[0])
    _check_topic(m.topic, m.type, m.feed)
    out = []
    for i, it in enumerate(lst):
        if not isinstance(it, dict):
            c.fail("wrong_type", 'field "%s[%d]" has the wrong type: expected an object, '
                   'got %s' % (name, i, _kind(it)))
        out.append(entry(_ctx(it, "", name, i)))
    setattr(m, name, out)
    return m


def _decode_detections(parts, limits):
    return _decode_list(parts, limits, Detections(), "detections", DETECTIONS_PARTS_TEXT,
                        _detection)


def _track_end(c, name):
    o = c.typed(name, True, True)
    ec = _ctx(o, c.prefix, name)
    seq = ec.u64("seq", True)
    mjd = ec.time_pair(required=True, nullable=True)
    return {"seq": seq, "time": mjd_to_iso(mjd) if mjd is not None else None, "mjd": mjd}


def _track(c):
    """One entry of "tracks", in the order of PROTOCOL.md §6a."""
    t = {"id": c.int("id", True, 1, MAX_INT, "1 to 2^53")}
    t["kind"] = c.str("kind", True)
    if t["kind"] not in TRACK_KINDS:
        c.fail("bad_value", 'field "%skind" is "%s" (expected point or streak)'
               % (c.prefix, t["kind"]))
    t["state"] = c.str("state", True)
    if t["state"] not in TRACK_STATES:
        c.fail("bad_value", 'field "%sstate" is "%s" (expected active, coasting or ended)'
               % (c.prefix, t["state"]))
    t["n"] = c.int("n", True, 1, 2147483647.0, "1 to 2^31-1")
    t["missed"] = c.int("missed", True, 0, 2147483647.0, "0 to 2^31-1")
    t["first"] = _track_end(c, "first")
    t["last"] = _track_end(c, "last")
    pc = _ctx(c.typed("position", True, True), c.prefix, "position")
    t["position"] = {"x": pc.num("x", True), "y": pc.num("y", True)}
    vc = _ctx(c.typed("velocity", True, True), c.prefix, "velocity")
    v = {k: vc.num(k, True, True) for k in ("x", "y", "err_x", "err_y")}
    v["unit"] = vc.str("unit", True)
    if v["unit"] not in TRACK_UNITS:
        c.fail("bad_value", 'field "%sunit" is "%s" (expected px/s or px/frame)'
               % (vc.prefix, v["unit"]))
    t["velocity"] = v
    t["rms"] = c.num("rms", True, True)
    t["snr"] = c.num("snr", True, True)
    t["rate"] = c.num("rate", False)
    t["pa"] = c.num("pa", False)
    if ("rate" in c.obj) != ("pa" in c.obj):
        c.fail("missing_field", 'missing field "%s%s" (rate and pa go together)'
               % (c.prefix, "pa" if "rate" in c.obj else "rate"))
    t["mag"], t["mag_err"] = _mag(c)
    pts = c.typed("points", True, False)
    if len(pts) > TRACK_POINTS:
        c.fail("bad_value", 'field "%spoints" has %d entries (maximum %d)'
               % (c.prefix, len(pts), TRACK_POINTS))
    t["points"] = []
    for i, p in enumerate(pts):
        if not isinstance(p, dict):
            c.fail("wrong_type", 'field "%spoints[%d]" has the wrong type: expected an object, '
                   'got %s' % (c.prefix, i, _kind(p)))
        pc = _ctx(p, c.prefix, "points", i)
        t["points"].append({"seq": pc.u64("seq", True), "x": pc.num("x", True),
                            "y": pc.num("y", True), "mjd": pc.num("mjd", True, True)})
    return t


def _stamp(c):
    s = {"det": c.int("det", True, 0, MAX_INT, "0 to 2^53"), "kind": c.str("kind", True)}
    for k in ("x", "y"):
        s[k] = c.num(k, True, True)
    for k in ("x0", "y0"):
        s[k] = c.int(k, True, -2147483648.0, 2147483647.0, "a 32-bit integer")
    for k in ("w", "h"):
        s[k] = c.int(k, True, 0, 65535, "0 to 65535")
    return s


def _decode_stamps(parts, limits):
    """A stamps message: the body as a list message, then each stamp's
    pixels as a (h, w) view of the pixel part, box after box."""
    _parts_count(len(parts), 3, 3, STAMPS_PARTS_TEXT)
    m = _decode_list(parts[:2], limits, Stamps(), "stamps", STAMPS_PARTS_TEXT, _stamp,
                     n_parts=3)
    c = _Ctx(m.header)
    dt = c.str("dtype", True)
    if dt != "f32":
        c.fail("unknown_dtype", 'unknown dtype "%s" (stamps are f32)' % dt)
    org = m.header.get("origin", [0, 0])
    m.origin = [int(v) for v in org]
    data = _part_bytes(parts[2])
    want = sum(s["w"] * s["h"] for s in m.stamps) * 4
    if data.nbytes != want:
        raise ProtocolError("data_size", "pixel part is %d bytes; the stamps say %d"
                            % (data.nbytes, want))
    px = np.frombuffer(data, dtype="<f4")
    off = 0
    for s in m.stamps:
        n = s["w"] * s["h"]
        s["pixels"] = _readonly(px[off:off + n].reshape(s["h"], s["w"]))
        off += n
    return m


def _decode_tracks(parts, limits):
    return _decode_list(parts, limits, Tracks(), "tracks", TRACKS_PARTS_TEXT, _track)


def _feed_stats(c):
    f = {"name": c.str("name", True, "name")}
    for k in ("state", "backend"):
        f[k] = c.str(k, False, cap=15)
    f["source"] = c.str("source", False, cap=127)
    for k in ("received", "accepted", "rejected"):
        f[k] = c.u64(k, False)
    rb = c.typed("rejected_by", False, True) or {}
    rc = _ctx(rb, c.prefix, "rejected_by")
    f["rejected_by"] = {r: rc.u64(r, False) for r in REASONS}
    f["dropped_queue"] = c.u64("dropped_queue", False)
    f["processed"] = c.u64("processed", False)
    st = c.typed("status", False, True) or {}
    sc = _ctx(st, c.prefix, "status")
    f["status"] = {s: sc.u64(s, False) for s in STATUS_NAMES}
    for k in ("detections", "detections_truncated", "reg_failures", "resets", "published",
              "pub_dropped"):
        f[k] = c.u64(k, False)
    f["queue_depth"] = c.int("queue_depth", False, 0, 2147483647.0, "0 to 2^31-1", 0)
    f["queue_capacity"] = c.int("queue_capacity", False, 0, 2147483647.0, "0 to 2^31-1", 0)
    f["fps"] = c.num("fps", False, True, 0.0)
    f["last_seq"] = c.u64("last_seq", False)
    f["last_mjd"] = c.time_pair("last_time", "last_mjd", nullable=True)
    sm = c.typed("stage_ms", False, True) or {}
    smc = _ctx(sm, c.prefix, "stage_ms")
    f["stage_ms"] = {s: smc.num(s, False, True, -1.0) for s in STAGES}
    f["total_ms"] = c.num("total_ms", False, True, -1.0)
    f["device_mem_used"] = c.u64("device_mem_used", False)
    f["device_mem_total"] = c.u64("device_mem_total", False)
    return f


def _status_members(c, m):
    m.version = c.str("version", False, cap=31)
    m.topic_seq = c.u64("topic_seq", False, default=None)
    m.mjd = c.time_pair(nullable=True)
    m.uptime_s = c.num("uptime_s", False, True, 0.0)
    feeds = c.typed("feeds", True, False)
    if len(feeds) > MAX_FEEDS:
        c.fail("bad_value", 'field "feeds" has %d entries (maximum %d)' % (len(feeds), MAX_FEEDS))
    m.feeds = []
    for i, it in enumerate(feeds):
        if not isinstance(it, dict):
            c.fail("wrong_type", 'field "feeds[%d]" has the wrong type: expected an object, got %s'
                   % (i, _kind(it)))
        m.feeds.append(_feed_stats(_ctx(it, "", "feeds", i)))


def _decode_status(parts, limits):
    _parts_count(len(parts), 2, 2, STATUS_PARTS_TEXT)
    m = Status()
    m.topic = _topic_of(parts[0])
    _check_topic(m.topic, "status", "")
    obj = _parse_object(_part_bytes(parts[1]), limits.max_header_bytes + MAX_FEEDS * 4096, "body")
    c = _Ctx(obj)
    m.header = obj
    c.version()
    c.type("status")
    _status_members(c, m)
    return m


def decode_output(parts, limits=None):
    """Decode a message skysieved publishes (topic part first): returns a
    Residual (of any form: float32 or float16 pixels, m.form the topic
    type), Stamps, Detections, Tracks or Status; raises ProtocolError."""
    limits = limits or Limits()
    if not parts:
        raise ProtocolError("missing_part", "empty message")
    topic = _topic_of(parts[0])
    form = topic.split(".", 1)[0]
    if form in RESIDUAL_FORMS and "." in topic:
        return _decode_residual(parts, limits, form)
    if topic.startswith("stamps."):
        return _decode_stamps(parts, limits)
    if topic.startswith("detections."):
        return _decode_detections(parts, limits)
    if topic.startswith("tracks."):
        return _decode_tracks(parts, limits)
    if topic == "status":
        return _decode_status(parts, limits)
    raise ProtocolError("bad_topic", 'topic "%s" is not a skysieve topic' % topic[:79])


def decode_status_body(data):
    """The members of a status/stats control response (or a status body)."""
    obj = _parse_object(data, 65536 + MAX_FEEDS * 4096, "body")
    m = Status()
    m.header = obj
    _status_members(_Ctx(obj), m)
    return m


def decode_request(data):
    """A control request as the daemon reads it: {"cmd": ..., "feed": ...}
    ("feed" "" when absent). Raises ProtocolError."""
    obj = _parse_object(data, REQUEST_MAX, "request")
    c = _Ctx(obj)
    if "protocol" in obj:
        c.version()
    cmd = c.str("cmd", True)
    if cmd not in COMMANDS:
        c.fail("unknown_type", 'unknown command "%s" (expected status, stats, reset, reload or '
               'config)' % cmd)
    return {"cmd": cmd, "feed": c.str("feed", False, "name")}


def decode_response(data):
    """A control response: (ok, cmd, error, body) where body is a dict of
    the members other than ok/cmd/error. Raises ProtocolError."""
    obj = _parse_object(data, 64 << 20, "response")
    c = _Ctx(obj)
    ok = c.bool("ok", True)
    cmd = c.str("cmd", False, cap=15)
    error = "" if ok else c.str("error", True, cap=255)
    body = {k: v for k, v in obj.items() if k not in ("ok", "cmd", "error")}
    return ok, cmd, error, body


# ---- encoding (senders) ------------------------------------------------------

def _wire_dtype(arr):
    kind = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.int16): "i16",
            np.dtype(np.int32): "i32", np.dtype(np.float32): "f32"}
    dt = kind.get(arr.dtype.newbyteorder("="))
    if dt is None:
        raise ValueError("pixel type %s is not one of uint8, uint16, int16, int32, float32"
                         % arr.dtype)
    return dt


def _compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_frame(pixels, seq, mjd=None, time=None, feed=None, series=None, exposure=None,
                 wcs=None, meta=None, mask=None):
    """The parts of a frame message: [header, pixels(, mask)].

    pixels: a 2-D array (height, width) of uint8/uint16/int16/int32/float32;
    sent little-endian, rows first, without a copy when it already is.
    mjd (float, UTC) or time (ISO-8601 UTC string); default: now.
    mask: optional array of the same shape, nonzero = valid (sent as 0/1)."""
    a = np.asarray(pixels)
    if a.ndim != 2:
        raise ValueError("pixels must be a 2-D array (height, width)")
    dt = _wire_dtype(a)
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    if mjd is None:
        mjd = iso_to_mjd(time) if time is not None else now_mjd()
        if mjd is None:
            raise ValueError("time %r is not ISO-8601 UTC" % (time,))
    h = {"protocol": PROTOCOL_VERSION, "type": "frame"}
    if feed:
        h["feed"] = feed
    if series:
        h["series"] = series
    h["seq"] = int(seq)
    h["time"] = mjd_to_iso(mjd)
    h["mjd"] = float(mjd)
    h["exposure"] = float(exposure or 0.0)
    h["width"], h["height"] = int(a.shape[1]), int(a.shape[0])
    h["dtype"] = dt
    if wcs:
        h["wcs"] = dict(wcs)
    if meta:
        h["meta"] = dict(meta)
    parts = [_compact(h).encode("utf-8"), memoryview(a).cast("B")]
    if mask is not None:
        mk = np.asarray(mask)
        if mk.shape != a.shape:
            raise ValueError("mask shape %s differs from the pixels' %s" % (mk.shape, a.shape))
        parts.append(np.ascontiguousarray(mk != 0, dtype=np.uint8).tobytes())
    return parts


def encode_series(kind, series, feed=None, mjd=None, frames=None, meta=None):
    """The one part of a series_start ("start") or series_end ("end") message."""
    t = {"start": "series_start", "end": "series_end"}.get(kind, kind)
    if t not in ("series_start", "series_end") or not series:
        raise ValueError("kind must be start or end, and series non-empty")
    h = {"protocol": PROTOCOL_VERSION, "type": t, "series": series}
    if feed:
        h["feed"] = feed
    if mjd is not None:
        h["time"] = mjd_to_iso(mjd)
        h["mjd"] = float(mjd)
    if frames is not None:
        h["frames"] = int(frames)
    if meta:
        h["meta"] = dict(meta)
    return [_compact(h).encode("utf-8")]


# ---- sockets -----------------------------------------------------------------

def read_key(path):
    """The CURVE key file at path (skysieve-keygen's NAME.key or NAME.pub,
    ZeroMQ's certificate text form): (public, secret) as Z85 bytes, secret
    None in a public key file. Raises ValueError naming the file."""
    keys = {}
    with open(path, "r", encoding="ascii", errors="replace") as fp:
        for line in fp:
            m = re.match(r'\s*(public|secret)-key\s*=\s*"([^"]{40})"', line)
            if m:
                keys[m.group(1)] = m.group(2).encode("ascii")
    if "public" not in keys:
        raise ValueError('%s: no valid public-key = "<40 Z85 characters>" line' % path)
    return keys["public"], keys.get("secret")


def _curve_client(sock, curve):
    """curve: None, or (this client's key file, the daemon's public key
    file): sock becomes a CURVE client (before it connects)."""
    if curve is None:
        return
    key_file, server_file = curve
    pub, sec = read_key(key_file)
    if sec is None:
        raise ValueError("%s: no secret-key line (a .pub file holds the public key only)"
                         % key_file)
    sock.curve_publickey = pub
    sock.curve_secretkey = sec
    sock.curve_serverkey = read_key(server_file)[0]


class Subscriber:
    """A SUB socket on skysieved's publisher.

    topics: topic prefixes to subscribe to ("detections.", "residual.",
    "tracks.", "status", and the forms that the daemon makes only while
    someone names them: "residual16.", "residual_every.",
    "residual16_every.", "stamps."; PROTOCOL.md §5a); with feed, only that
    feed's per-feed topics are subscribed and matched exactly (ZeroMQ matches prefixes: "cam1" would
    also take "cam10"). recv() returns decoded messages; messages of
    other topics are skipped. curve=(this client's key file, the daemon's
    public key file) makes it a CURVE client (daemon with security.curve_key:
    README "Authentication").

    Gaps: every message the daemon publishes carries topic_seq, its number
    on its topic. A message after a gap gets m.gap = the messages of its
    topic this subscriber missed just before it (0 otherwise); self.missed
    is the total (PROTOCOL.md §2, "Gaps")."""

    def __init__(self, endpoint, topics=("detections.", "residual."), feed=None, bind=False,
                 context=None, rcvhwm=100, limits=None, curve=None):
        self._ctx = context or zmq.Context.instance()
        self.sock = self._ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.LINGER, 0)
        _curve_client(self.sock, curve)
        self.limits = limits or Limits()
        self.exact = None
        if feed:
            subs = [t + feed if t.endswith(".") else t for t in topics]
            self.exact = set(subs)
        else:
            subs = list(topics)
        for t in subs:
            self.sock.setsockopt(zmq.SUBSCRIBE, t.encode("utf-8"))
        (self.sock.bind if bind else self.sock.connect)(endpoint)
        self.missed = 0
        self._next_seq = {}

    def _note_gap(self, topic, m):
        """m.gap from topic_seq (a lower number: the daemon started again)."""
        m.gap = 0
        seq = getattr(m, "topic_seq", None)
        if seq is None:
            return
        expect = self._next_seq.get(topic)
        if expect is not None and seq > expect:
            m.gap = seq - expect
            self.missed += m.gap
        self._next_seq[topic] = seq + 1

    def recv(self, timeout=None):
        """The next message, decoded (Residual, Detections, Tracks or
        Status); None when timeout (seconds) passes first. Raises
        ProtocolError on a malformed message (it has been consumed)."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - _time.monotonic())
            if not self.sock.poll(None if wait is None else int(wait * 1000)):
                return None
            parts = self.sock.recv_multipart(copy=False)
            topic = _topic_of(parts[0])
            if self.exact is not None and topic not in self.exact:
                continue
            m = decode_output(parts, self.limits)
            self._note_gap(topic, m)
            return m

    def __iter__(self):
        while True:
            m = self.recv()
            if m is not None:
                yield m

    def close(self):
        self.sock.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Sender:
    """Sends frames to skysieved: PUSH connect by default (the daemon's
    default zmq source is PULL bind); bind=True binds instead; pub=True
    uses a PUB socket (for a daemon source of kind SUB). send_timeout
    (seconds) bounds a blocked send (no receiver): zmq.Again is raised.
    curve=(key_file, server_key_file): CURVE, as Subscriber's."""

    def __init__(self, endpoint, bind=False, pub=False, context=None, sndhwm=16,
                 send_timeout=None, feed=None, curve=None):
        self._ctx = context or zmq.Context.instance()
        self.sock = self._ctx.socket(zmq.PUB if pub else zmq.PUSH)
        _curve_client(self.sock, curve)
        self.sock.setsockopt(zmq.SNDHWM, sndhwm)
        self.sock.setsockopt(zmq.LINGER, 2000)
        if send_timeout is not None:
            self.sock.setsockopt(zmq.SNDTIMEO, int(send_timeout * 1000))
        self.feed = feed
        (self.sock.bind if bind else self.sock.connect)(endpoint)

    def send_frame(self, pixels, seq, copy=True, **kw):
        """Send one frame; keywords as encode_frame's (feed defaults to the
        Sender's). copy=False hands the array's memory to ZeroMQ without a
        copy: the array must then stay unmodified until the message has
        gone (pyzmq's tracker tells when)."""
        kw.setdefault("feed", self.feed)
        self.sock.send_multipart(encode_frame(pixels, seq, **kw), copy=copy)

    def series_start(self, series, **kw):
        kw.setdefault("feed", self.feed)
        self.sock.send_multipart(encode_series("start", series, **kw))

    def series_end(self, series, **kw):
        kw.setdefault("feed", self.feed)
        self.sock.send_multipart(encode_series("end", series, **kw))

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def control(endpoint, cmd, feed=None, timeout=5.0, context=None, curve=None):
    """Send a control request ("status", "stats", "reset", "reload",
    "config") and return the response as a dict ({"ok": True, ...} or
    {"ok": False, "error": ...}). Raises TimeoutError if no answer comes.
    curve: as Subscriber's."""
    if cmd not in COMMANDS:
        raise ValueError("cmd must be one of %s" % ", ".join(COMMANDS))
    ctx = context or zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    _curve_client(s, curve)
    try:
        s.connect(endpoint)
        req = {"cmd": cmd}
        if feed:
            req["feed"] = feed
        s.send(_compact(req).encode("utf-8"))
        if not s.poll(int(timeout * 1000)):
            raise TimeoutError("no answer from %s within %g s" % (endpoint, timeout))
        resp = _parse_object(s.recv(), 64 << 20, "response")
        c = _Ctx(resp)
        c.bool("ok", True)
        c.str("cmd", False, cap=15)
        if not resp["ok"]:
            c.str("error", True, cap=255)
        return dict(resp)
    finally:
        s.close()
