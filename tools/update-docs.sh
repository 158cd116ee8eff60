#!/bin/sh
# Regenerate what the README quotes from the code: the config key
# reference (between the CONFIG REFERENCE markers) and the example config.
# Usage: tools/update-docs.sh [build-dir]   (after building)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
ref=$(mktemp)
"$build/daemon/skysieved" --print-config-reference > "$ref"
python3 - "$ref" <<'PY'
import sys
ref = open(sys.argv[1]).read().rstrip("\n") + "\n"
s = open("README.md").read()
b = s.index("<!-- BEGIN CONFIG REFERENCE")
b = s.index("\n", b) + 1
e = s.index("<!-- END CONFIG REFERENCE -->")
open("README.md", "w").write(s[:b] + ref + s[e:])
PY
rm -f "$ref"
"$build/daemon/skysieved" --print-default-config > config/skysieved.example.json
echo "README.md config reference and config/skysieved.example.json regenerated"
