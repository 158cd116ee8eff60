"""skyfield.py -- the sky of the INDI CCD simulator test (tests/indi/).

indi_simulator_ccd (libindi 1.9.9, drivers/ccd/ccd_simulator.cpp) draws a
star field by running `gsc -c RA DEC -r RADIUS -m 0 MAGLIM -n 3000` and
projecting every star the catalogue prints. Debian ships no gsc, so the
test puts its own stand-in (tests/indi/gsc) first on PATH. This module is
what the stand-in and capture.py share:

  * project() / unproject(): the simulator's projection of a catalogue
    star onto the chip and its inverse;
  * STARS and the mover: the field, defined in pixels of the first frame
    (the "anchor" frame) and turned into fixed RA/Dec by the stand-in, so
    that a pointing change moves every star the way it moves a real sky.

The projection (DrawCcdFrame, libindi 1.9.9): with (ra0, dec0) the frame
centre the simulator passes to gsc -c (J2000 degrees, after its JNow ->
J2000 conversion of the pointing), a star's standard coordinates are

  sx = cos d sin(a - a0) / D      (east)
  sy = (sin d0 cos d cos(a - a0) - cos d0 sin d) / D      (minus north)
  D  = cos d0 cos d cos(a - a0) + sin d0 sin d

and, with p = focal length / pixel size (pixels per radian) and the
chip turned by theta = 270 degrees (the 1.9.9 default with no rotator,
SIM_ROTATION 0):

  x = W - (p cos(theta) sx + p sin(theta) sy + W/2)  =  W/2 - p * north
  y = -p sin(theta) sx + p cos(theta) sy + H/2       =  H/2 + p * east

so north is towards -x and east towards +y, in the row order of the
frame buffer, which is the order of the FITS file (ROWORDER =
'TOP-DOWN': the file's first row is the buffer's row 0; CFITSIO and
ss_fits_read_frame return rows in file order, so these are also the
pipeline's pixel coordinates). The simulator then draws the star as a
fixed Gaussian stamp centred on the whole pixel (int(x), int(y))
(DrawImageStar -> AddToPixel(int x, int y): truncation). That is why
every star here sits on a half pixel in the anchor frame: its drawn
pixel stays the same under the rounding of the projection (< 0.01 px)
and moves by exactly (dx, dy) when the pointing moves the field by
whole pixels. The mover, on a fixed RA/Dec track, is drawn at the
truncated pixel of its projected position: it steps by 0 or 1 px.

Measured on the simulator (FL 800 mm, 5.2 um pixels): a star 100 arcsec
east of the centre is drawn 75 px below it (+y), one 200 arcsec north
149 px to its left (-x); capture.py checks every frame against this.
"""
import json
import math
import os

# The simulator's degrees-to-radians factor (ccd_simulator.cpp multiplies
# by 0.0174532925, not pi/180): using it here keeps the rounding the same.
SIM_RAD = 0.0174532925
SIM_THETA_DEG = 270.0

# Chip and optics the test configures (capture.py writes them to the
# state directory's config.json, which the stand-in reads).
DEFAULTS = {"width": 1280, "height": 1024, "pixel_um": 5.2, "focal_mm": 800.0, "n_stars": 30}

# The field, in pixels of the anchor frame (the first frame, pointing
# offset 0): (x, y, magnitude). 30 stars, at least 60 px apart, at least
# 48 px from the edges (more than the jitter), at least 30 px from the
# mover's track; magnitudes 3.5 to 10 (peaks of about 200 to 16000 ADU
# at 0.5 s, gain 90: the simulator's default zero point puts magnitude
# 17 at 1 ADU/s, 2x per magnitude, times 1 + sqrt(gain)).
STARS = [
    (1227.5, 967.5, 9.8), (1059.5, 211.5, 4.6), (1195.5, 138.5, 7.0),
    (820.5, 445.5, 8.3), (108.5, 718.5, 9.9), (254.5, 482.5, 7.7),
    (274.5, 738.5, 8.7), (625.5, 398.5, 6.5), (717.5, 94.5, 9.7),
    (605.5, 99.5, 6.6), (1205.5, 288.5, 4.8), (1025.5, 651.5, 4.2),
    (706.5, 866.5, 6.2), (1110.5, 426.5, 10.0), (906.5, 450.5, 8.2),
    (1148.5, 572.5, 8.9), (1109.5, 317.5, 5.5), (307.5, 104.5, 5.6),
    (856.5, 554.5, 7.9), (502.5, 322.5, 3.6), (913.5, 942.5, 6.5),
    (1076.5, 831.5, 7.0), (663.5, 796.5, 4.7), (1012.5, 506.5, 7.1),
    (399.5, 889.5, 6.1), (118.5, 177.5, 8.8), (924.5, 589.5, 5.0),
    (382.5, 781.5, 8.1), (651.5, 305.5, 9.4), (872.5, 238.5, 9.6),
]

# The slow mover: at gsc call n (frame n) it is at MOVER_X0 + n MOVER_VX,
# MOVER_Y0 + n MOVER_VY in anchor-frame pixels (0.71 px per frame), a
# medium star's brightness. Its track is fixed on the sky, not on the chip.
# Its coordinates are always a quarter pixel from a pixel boundary, so
# the drawn pixel (truncation) never depends on rounding; it steps by one
# pixel in x and y every second frame. It stays 38 px or more from every
# star for 200 frames.
MOVER_X0, MOVER_Y0 = 700.25, 380.25
MOVER_VX, MOVER_VY = 0.5, 0.5
MOVER_MAG = 7.0


def load_config(state_dir):
    """The chip/optics of config.json in state_dir, else DEFAULTS."""
    cfg = dict(DEFAULTS)
    if state_dir:
        path = os.path.join(state_dir, "config.json")
        if os.path.exists(path):
            with open(path) as f:
                cfg.update(json.load(f))
    return cfg


def _plate(cfg):
    """The simulator's plate constants pa, pb, pd, pe (pixels per radian)."""
    p = cfg["focal_mm"] / cfg["pixel_um"] * 1000.0
    th = SIM_THETA_DEG * math.pi / 180.0
    return p * math.cos(th), p * math.sin(th), p * -math.sin(th), p * math.cos(th)


def project(ra, dec, ra0, dec0, cfg):
    """Chip position (x, y), unrounded, of a star at ra, dec (J2000 degrees)
    when the simulator's frame centre is ra0, dec0. The drawn pixel is
    (int(x), int(y))."""
    a, d, a0, d0 = ra * SIM_RAD, dec * SIM_RAD, ra0 * SIM_RAD, dec0 * SIM_RAD
    den = math.cos(d0) * math.cos(d) * math.cos(a - a0) + math.sin(d0) * math.sin(d)
    sx = math.cos(d) * math.sin(a - a0) / den
    sy = (math.sin(d0) * math.cos(d) * math.cos(a - a0) - math.cos(d0) * math.sin(d)) / den
    pa, pb, pd, pe = _plate(cfg)
    w, h = cfg["width"], cfg["height"]
    x = w - (pa * sx + pb * sy + w // 2)
    y = pd * sx + pe * sy + h // 2
    return x, y


def unproject(x, y, ra0, dec0, cfg):
    """The RA/Dec (J2000 degrees) that project() puts at chip position x, y."""
    pa, pb, pd, pe = _plate(cfg)
    w, h = cfg["width"], cfg["height"]
    u, v = w - x - w // 2, y - h // 2
    det = pa * pe - pb * pd
    sx = (u * pe - pb * v) / det
    sy = (pa * v - pd * u) / det
    xi, eta = sx, -sy
    d0, a0 = dec0 * SIM_RAD, ra0 * SIM_RAD
    den = math.cos(d0) - eta * math.sin(d0)
    a = a0 + math.atan2(xi, den)
    d = math.atan2(math.sin(d0) + eta * math.cos(d0), math.hypot(xi, den))
    ra = (a / SIM_RAD) % 360.0
    return ra, d / SIM_RAD


def stars(cfg):
    """The first cfg["n_stars"] of STARS (capture.py --stars: sparser fields)."""
    return STARS[:max(0, min(len(STARS), int(cfg.get("n_stars", len(STARS)))))]


def mover_anchor_xy(n):
    """The mover's anchor-frame position at gsc call n."""
    return MOVER_X0 + n * MOVER_VX, MOVER_Y0 + n * MOVER_VY
