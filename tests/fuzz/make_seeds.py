#!/usr/bin/python3
"""Write the fuzz targets' seed corpora into tests/fuzz/corpus/<target>/
from the golden messages (tests/golden/), the malformed output messages
of tests/golden/malformed.json, the example configs and a few small FITS
files made here. Run from anywhere; rewrites the corpora:

    python3 tests/fuzz/make_seeds.py

Message inputs use fuzz_parts.h's framing: [n][len16 part]...[last part].
"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden")


def golden(name):
    d = os.path.join(GOLDEN, name)
    out = []
    for f in sorted(os.listdir(d)):
        if f[0].isdigit():
            with open(os.path.join(d, f), "rb") as fp:
                out.append(fp.read())
    return out


def framed(parts):
    b = bytes([(len(parts) - 1) % 8])
    for p in parts[:-1]:
        b += struct.pack("<H", len(p)) + p
    return b + parts[-1]


def card(key, value=None, comment=""):
    if value is None:
        text = key
    elif isinstance(value, str):
        text = "%-8s= '%s'" % (key, value)
    elif isinstance(value, bool):
        text = "%-8s= %20s" % (key, "T" if value else "F")
    else:
        text = "%-8s= %20s" % (key, value)
    if comment:
        text += " / " + comment
    return text.ljust(80)[:80].encode("ascii")


def fits(bitpix, w, h, data, extra=()):
    cards = [card("SIMPLE", True), card("BITPIX", bitpix), card("NAXIS", 2),
             card("NAXIS1", w), card("NAXIS2", h)]
    cards += [card(k, v) for k, v in extra]
    cards.append(card("END"))
    hdr = b"".join(cards)
    hdr += b" " * (-len(hdr) % 2880)
    return hdr + data + b"\0" * (-len(data) % 2880)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fp:
        fp.write(data)


def main():
    for g in ("frame_u16", "frame_f32_minimal", "series_start", "series_end"):
        write("frame", g, framed(golden(g)))
    for g in ("residual", "detections", "detections_regfail", "tracks", "status"):
        write("results", g, framed(golden(g)))
    # the refused output messages: a start next to each rejection path
    with open(os.path.join(GOLDEN, "malformed.json"), "rb") as fp:
        for c in json.load(fp):
            if c.get("decoder") == "output":
                parts = [p.encode("utf-8") for p in c["parts"]]
                write("results", "malformed-" + c["name"], framed(parts))
    for g in ("control_request", "control_response_ok", "control_response_error",
              "control_response_status"):
        write("control", g, golden(g)[0])
    for rel in ("config/skysieved.example.json", "deploy/skysieved-cam1.example.json"):
        with open(os.path.join(ROOT, rel), "rb") as fp:
            write("config", os.path.basename(rel), fp.read())
    u16 = b"".join(struct.pack(">h", v - 32768) for v in range(100, 164))
    meta = [("BZERO", 32768), ("BSCALE", 1), ("DATE-OBS", "2026-11-22T06:00:00.000"),
            ("EXPTIME", 2.5), ("SEQ", 7), ("TRIMSEC", "[1:6,1:8]"), ("BIASSEC", "[7:8,1:8]")]
    plain = fits(16, 8, 8, u16, meta)
    write("fits", "u16_sections.fits", plain)
    write("fits", "u16_sections.fits.gz", gzip.compress(plain, mtime=0))
    f32 = b"".join(struct.pack(">f", 0.5 * v) for v in range(16))
    write("fits", "f32.fits", fits(-32, 4, 4, f32, [("DATE-OBS", "2026-11-22"),
                                                  ("UTCSTART", "06:00:00")]))


if __name__ == "__main__":
    main()
