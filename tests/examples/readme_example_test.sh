#!/usr/bin/env bash
# README.md's "Using dpe in your own code" shows examples/custom_model/custom_model.cc in full,
# in a ```cpp block: the block must be the file, line for line.
set -euo pipefail
block=$(awk '/^```cpp$/ {on = 1; next} on && /^```$/ {exit} on' README.md)
if [[ "$block" != "$(cat examples/custom_model/custom_model.cc)" ]]; then
  echo "FAIL: README.md's example differs from examples/custom_model/custom_model.cc:"
  diff <(echo "$block") examples/custom_model/custom_model.cc || true
  exit 1
fi
echo "PASS: README.md shows custom_model.cc as it is ($(wc -l <examples/custom_model/custom_model.cc) lines)"
