#!/usr/bin/env bash
# Renders every chart spec in examples/charts/ to docs/charts/NAME.png and rewrites the gallery in docs/charts.md.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product richpush >/dev/null
mkdir -p docs/charts
{
  echo "# Chart gallery"
  echo
  echo "Every spec in \`examples/charts/\`, rendered by \`Scripts/render-gallery.sh\` with \`richpush chart\`: the same"
  echo "renderer the device library and the server use, so these are the pixels a user sees. The spec format is in"
  echo "[payload-format.md](payload-format.md#4-chart-spec)."
  echo
  for spec in examples/charts/*.json; do
    name=$(basename "$spec" .json)
    line=$(.build/release/richpush chart "$spec" --out "docs/charts/$name.png")
    bytes=$(wc -c < "$spec" | tr -d ' ')
    echo "## $name"
    echo
    echo "Spec: [\`$spec\`](../$spec), $bytes bytes of JSON. Output: ${line#*: }."
    echo
    echo "![$name](charts/$name.png)"
    echo
  done
} > docs/charts.md
echo "wrote docs/charts.md and $(ls docs/charts/*.png | wc -l) PNGs"
