#!/usr/bin/env bash
# Renders compare's chart in a real browser, as the docs show it: headless
# Chromium (Debian's chromium package) takes a PNG screenshot of the SVG at
# its own size, for a person to look at before the chart is committed.
#
#   cmd/compare/screenshot.sh docs/compare.svg /tmp/compare.png
set -euo pipefail
svg=$1 png=$2
size=$(sed -n 's/^<svg[^>]* width="\([0-9]*\)" height="\([0-9]*\)".*/\1,\2/p' "$svg" | head -n 1)
[ -n "$size" ] || { echo "screenshot.sh: no width and height in $svg" >&2; exit 1; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$size" --screenshot="$png" "file://$(realpath "$svg")" 2>/dev/null
echo "screenshot.sh: $png ($size)"
