#!/bin/sh
# Install the Debian 12 packages skysieve needs to build, test and run.
# Idempotent; run as root (or through sudo). CUDA is optional: the CUDA
# backend is built when nvcc is found (/usr/local/cuda or PATH).
set -eu
# indi-bin: indiserver and indi_simulator_ccd, for tests/check_indi.c;
# libexpat1-dev: the XML parser of the INDI source (daemon/indi_stream.c);
# zlib1g-dev: gzip'ed FITS inflated with a bound; clang and libclang-rt-14-dev:
# the libFuzzer targets (tools/fuzz.sh); wcslib-dev: sky coordinates;
# astrometry.net: solve-field (plate solving, wcs.solve) and query-starkd
# (the tests' catalogue stars); astrometry-data-tycho2-10-19: the smallest
# Tycho-2 index set (fields of 1 deg and more; 21.7 MB download, 36 MB
# installed; with astrometry.net's own dependencies 48 MB download, 136 MB
# installed on Debian 12). The 07/08/09 sets, for smaller fields, are
# 27-88 MB each: a station installs the one its field needs, CI does not.
PKGS="build-essential cmake pkg-config libzmq3-dev libcjson-dev libcfitsio-dev zlib1g-dev wcslib-dev
      libexpat1-dev libsystemd-dev check python3 python3-zmq python3-numpy fitsverify indi-bin
      clang libclang-rt-14-dev astrometry.net astrometry-data-tycho2-10-19"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "installing:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
