#!/usr/bin/python3
"""Reference pixel <-> sky pairs for tests/check_wcs.c, computed by an
independent tool (astropy.wcs, Debian python3-astropy) — run by hand when
the headers change; its outputs are committed:

  <name>.fits      a 64x64 16-bit image with the header (some numeric values
                   written as quoted strings, as some pipelines do)
  <name>.txt       x y ra dec per line: 0-based pixel, degrees (ICRS)

Usage: tests/data/wcs/make_reference.py [outdir]   (default: its own dir)
"""
import os
import sys

import numpy as np
from astropy.io import fits
from astropy.wcs import WCS

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

BASE = {"CRPIX1": 1024.5, "CRPIX2": 980.25, "CRVAL1": 150.1, "CRVAL2": 2.2,
        "CD1_1": -1.1e-4, "CD1_2": 1.2e-5, "CD2_1": 1.0e-5, "CD2_2": 1.1e-4,
        "RADESYS": "ICRS", "EQUINOX": 2000.0}

HEADERS = {
    "tan": dict(BASE, CTYPE1="RA---TAN", CTYPE2="DEC--TAN"),
    "sip": dict(BASE, CTYPE1="RA---TAN-SIP", CTYPE2="DEC--TAN-SIP", A_ORDER=3, B_ORDER=3,
                A_2_0=2.1e-6, A_1_1=-1.3e-6, A_0_2=4.0e-7, A_3_0=-3.0e-10, A_1_2=2.2e-10,
                B_2_0=-6.0e-7, B_1_1=1.8e-6, B_0_2=-2.4e-6, B_0_3=3.1e-10, B_2_1=-1.5e-10),
    "tpv": dict(BASE, CTYPE1="RA---TPV", CTYPE2="DEC--TPV",
                PV1_0=1.2e-4, PV1_1=1.0004, PV1_2=-2.1e-4, PV1_4=3.3e-3, PV1_5=-1.8e-3,
                PV1_6=9.0e-4, PV1_7=-1.1e-2, PV1_9=4.0e-3,
                PV2_0=-3.0e-5, PV2_1=0.9997, PV2_2=1.5e-4, PV2_4=-2.7e-3, PV2_5=2.2e-3,
                PV2_6=-1.2e-3, PV2_8=6.0e-3, PV2_10=-9.0e-3),
    "zpn": dict(BASE, CTYPE1="RA---ZPN", CTYPE2="DEC--ZPN", CD1_1=-1.1e-3, CD2_2=1.1e-3,
                CD1_2=1.2e-4, CD2_1=1.0e-4, PV2_0=0.0, PV2_1=1.0, PV2_2=0.0, PV2_3=-0.05),
    "sin": dict(BASE, CTYPE1="RA---SIN", CTYPE2="DEC--SIN", CRVAL2=-62.5),
    "swapped": {"CTYPE1": "DEC--TAN", "CTYPE2": "RA---TAN", "CRPIX1": 512.0, "CRPIX2": 300.0,
                "CRVAL1": 41.3, "CRVAL2": 210.7, "CDELT1": 2.8e-4, "CDELT2": -2.8e-4,
                "PC1_1": 0.0, "PC1_2": 1.0, "PC2_1": 1.0, "PC2_2": 0.0, "RADESYS": "FK5",
                "EQUINOX": 2000.0},
}
QUOTED = {"tan": ("CRVAL1", "CD2_2"), "sip": ("A_2_0",)}   # written as '...' strings


def pairs(w, n=40, span=2048):
    rng = np.random.default_rng(7)
    xy = rng.uniform(-0.1 * span, 1.1 * span, size=(n, 2))
    xy[0] = (BASE["CRPIX1"] - 1, BASE["CRPIX2"] - 1)
    sky = w.all_pix2world(xy, 0)
    return xy, sky


def main():
    for name, keys in HEADERS.items():
        h = fits.Header()
        for k, v in keys.items():
            h[k] = v
        w = WCS(h)
        xy, sky = pairs(w)
        with open(os.path.join(OUT, name + ".txt"), "w") as f:
            f.write("# x y ra dec (0-based px, deg): astropy %s, header %s.fits\n"
                    % (__import__("astropy").__version__, name))
            lng, lat = w.wcs.lng, w.wcs.lat      # world axes in header order
            for (x, y), s in zip(xy, sky):
                ra, dec = s[lng], s[lat]
                f.write("%.6f %.6f %.12f %.12f\n" % (x, y, ra, dec))
        hdr = fits.Header()
        for k, v in keys.items():
            if k in QUOTED.get(name, ()):
                hdr[k] = repr(v)            # the quoted-string form
            else:
                hdr[k] = v
        fits.PrimaryHDU(np.zeros((64, 64), dtype=np.int16), header=hdr).writeto(
            os.path.join(OUT, name + ".fits"), overwrite=True)


if __name__ == "__main__":
    main()
