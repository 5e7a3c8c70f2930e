#!/usr/bin/env bash
# check_libs.sh (tools/gpu) on a bundle of one program, //tools:train: it fails naming the
# library a program needs that the bundle lacks, and passes once lib/ holds every library that
# is neither the C/C++ runtime nor CUDA's (so CUDA's libraries, which train needs where CUDA is
# built, are accepted without being carried).
set -euo pipefail
check=tools/gpu/check_libs.sh
bundle=$TEST_TMPDIR/bundle
mkdir -p "$bundle/bin" "$bundle/lib"
cp tools/train "$bundle/bin/"

if out=$("$check" "$bundle" 2>&1); then
  echo "FAIL: a bundle without libraries passed: $out"
  exit 1
fi
grep -q "bin/train needs libgomp.so.1: not in $bundle/lib" <<<"$out" ||
  { echo "FAIL: the error does not name libgomp.so.1: $out"; exit 1; }

skip() { grep -v '^#' tools/gpu/system_libs.txt tools/gpu/cuda_libs.txt | cut -d: -f2 | grep -qxF "$1"; }
ldd tools/train | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
  skip "$name" || cp -L "$path" "$bundle/lib/$name"
done
out=$("$check" "$bundle")
grep -q "^check_libs: ok (1 programs" <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "PASS"
