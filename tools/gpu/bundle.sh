#!/usr/bin/env bash
# bundle.sh [OUT]: the GPU bundle (tools/gpu/README.md). Builds for a GPU machine (sm_80/sm_90
# kernels, x86-64-v3 host code: --config=gpu_bundle) the test binary with every GPU test
# (//tests/gpu:gpu_tests), bench, demo, train and launch; gathers them with the shared libraries
# they need that such a machine lacks (everything but the C/C++ runtime and CUDA's own libraries),
# a slice of Fashion-MNIST, run.sh and the PyTorch side-by-side; checks that every library
# resolves (check_libs.sh); and packs it all into OUT/dpe-gpu.tar.xz (OUT defaults to
# gpu-bundle/, which git ignores). Prints the packed size and fails over 60 MiB.
#
#   tools/gpu/bundle.sh
#   tar xJf gpu-bundle/dpe-gpu.tar.xz -C /tmp && /tmp/dpe-gpu/run.sh --no-gpu /tmp/gpu-out
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-gpu-bundle}")
max_bytes=$((60 * 1024 * 1024))
# Fashion-MNIST images carried: enough for every batch the run takes, a few MB.
train_images=8192
test_images=2048

targets=(//tests/gpu:gpu_tests //tools:bench //tools:demo //tools:train //tools:launch)
tools/bazelw build --config=gpu_bundle "${targets[@]}"
bin=$(tools/bazelw info --config=gpu_bundle bazel-bin 2>/dev/null)

# Staged in a temporary folder; only the archive stays in OUT.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/dpe-gpu"
rm -rf "$out"
mkdir -p "$out" "$stage/bin" "$stage/lib/compat" "$stage/data/fashion-mnist"
cp "$bin/tests/gpu/gpu_tests" "$bin/tools/bench" "$bin/tools/demo" "$bin/tools/train" \
  "$bin/tools/launch" "$stage/bin/"
chmod u+w "$stage"/bin/*

# The libraries: every NEEDED entry, followed through the libraries copied, that is neither the
# C/C++ runtime nor CUDA's; found where this machine's loader finds it (ldd of the program).
skip() { grep -v '^#' tools/gpu/system_libs.txt tools/gpu/cuda_libs.txt | cut -d: -f2 | grep -qxF "$1"; }
declare -A where=()
for p in "$stage"/bin/*; do
  while read -r name path; do where[$name]=$path; done < <(ldd "$p" | awk '$3 ~ /^\// {print $1, $3}')
done
declare -A copied=()
copy_needs() {  # ELF file
  local name
  while read -r name; do
    [[ -n ${copied[$name]:-} ]] && continue
    copied[$name]=1
    skip "$name" && continue
    [[ -n ${where[$name]:-} ]] || { echo "bundle: no path for $name (needed by $1)" >&2; exit 1; }
    cp -L "${where[$name]}" "$stage/lib/$name"
    chmod u+w "$stage/lib/$name"
    strip --strip-unneeded "$stage/lib/$name"
    copy_needs "$stage/lib/$name"
  done < <(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
}
for p in "$stage"/bin/*; do copy_needs "$p"; done
# The build's C++ runtime, used only where the GPU machine's own is older (run.sh decides).
for name in libstdc++.so.6 libgcc_s.so.1; do
  [[ -n ${where[$name]:-} ]] && cp -L "${where[$name]}" "$stage/lib/compat/$name"
done

# The first images of Fashion-MNIST's training and test sets, in its own IDX .gz format.
python3 - "$stage/data/fashion-mnist" "$train_images" "$test_images" <<'PY'
import gzip, struct, sys
dst, counts = sys.argv[1], {"train": int(sys.argv[2]), "t10k": int(sys.argv[3])}
src = "/usr/share/datasets/fashion-mnist"
for split, n in counts.items():
    for kind, header, item in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        name = f"{split}-{kind}-ubyte.gz"
        with gzip.open(f"{src}/{name}") as f:
            head = bytearray(f.read(header))
            body = f.read(n * item)
        struct.pack_into(">I", head, 4, n)
        with gzip.open(f"{dst}/{name}", "wb") as f:
            f.write(bytes(head) + body)
PY

cp tools/gpu/run.sh tools/gpu/check_libs.sh tools/gpu/pytorch_eager.py tools/gpu/cuda_libs.txt \
  tools/gpu/system_libs.txt tools/gpu/README.md "$stage/"
{ git describe --always --dirty && git log -1 --format=%cd; } 2>/dev/null | paste -sd' ' | sed 's/^/dpe /' >"$stage/VERSION" || echo "dpe (no git)" >"$stage/VERSION"

tools/gpu/check_libs.sh "$stage"
tar -C "$tmp" -cf - dpe-gpu | xz -T0 -6 >"$out/dpe-gpu.tar.xz"
bytes=$(stat -c %s "$out/dpe-gpu.tar.xz")
echo "bundle: $out/dpe-gpu.tar.xz, $((bytes / 1024 / 1024)) MiB ($bytes bytes;" \
  "$(du -sm "$stage" | cut -f1) MiB unpacked)"
((bytes <= max_bytes)) || { echo "bundle: over the 60 MiB that may travel" >&2; exit 1; }
