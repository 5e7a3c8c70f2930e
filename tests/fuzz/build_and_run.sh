#!/usr/bin/env bash
# Builds the libFuzzer targets (ASan + UBSan) with clang 14 and runs each for a bounded time on
# its seed corpus. Exit status 1 on any finding (crash, sanitizer report, leak, timeout, OOM).
#
# Why outside Bazel: the project's Bazel toolchain is the system gcc, and gcc has no libFuzzer
# (-fsanitize=fuzzer); a second clang toolchain for Bazel 4.2.3 offline is more machinery than
# a handful of targets need. This script compiles the few engine sources the readers need directly.
#
#   tests/fuzz/build_and_run.sh                 # build, then run every target 60 s
#   tests/fuzz/build_and_run.sh 600             # ... 600 s each
#   tests/fuzz/build_and_run.sh 60 safetensors  # only the named targets
#   FUZZ_BUILD_ONLY=1 tests/fuzz/build_and_run.sh
#
# Binaries go to $FUZZ_OUT (default /tmp/dpe_fuzz); the corpus grown by a run stays there
# ($FUZZ_OUT/corpus/<target>), the committed seeds in tests/fuzz/corpus/<target> are only read.
# A finding is written to $FUZZ_OUT/crashes/<target>/ and named in the output; reproduce it with
#   $FUZZ_OUT/<target>_fuzz <file>
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors idx tcp_store topology token_cache checkpoint_json
  state_key)
out=${FUZZ_OUT:-/tmp/dpe_fuzz}
jobs=${FUZZ_JOBS:-2}

# clang 14 with libFuzzer and the sanitizer runtimes, libomp for the engine's -fopenmp code.
packages=(clang-14 libclang-rt-14-dev libomp-14-dev libtbb-dev libdnnl-dev zlib1g-dev
          nlohmann-json3-dev)
missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing missing Debian packages: ${missing[*]}" >&2
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || exit 1
fi

CXX=clang++-14
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fopenmp -I. "${SAN[@]}")

# The engine sources each target needs (the transitive srcs of its Bazel deps, CUDA off).
tensor_srcs=(engine/device/device.cc engine/device/memory_category.cc
  engine/device/memory_stats.cc engine/device/allocator.cc engine/device/device_context.cc
  engine/device/device_guard.cc engine/device/worker.cc engine/device/runtime.cc
  engine/device/device_registry.cc engine/device/step_observer.cc
  engine/backend/host/host_allocator.cc engine/backend/host/host_device.cc
  engine/backend/host/host_device_type.cc engine/backend/cuda/cuda_devices.cc
  engine/backend/cuda/cuda_device_stub.cc kernels/host/convert.cc kernels/host/copy.cc
  kernels/host/host_context.cc
  engine/tensor/shape.cc engine/tensor/tensor.cc)
declare -A srcs libs
srcs[safetensors]="${tensor_srcs[*]} engine/io/atomic_file.cc engine/io/json_nesting.cc
  engine/io/safetensors.cc"
libs[safetensors]="-ltbb -ldnnl"
srcs[idx]="${tensor_srcs[*]} engine/data/dataset.cc engine/data/fashion_mnist.cc"
libs[idx]="-ltbb -ldnnl -lz"
srcs[tcp_store]="engine/distributed/tcp_store_wire.cc engine/distributed/tcp_store_server.cc"
libs[tcp_store]=""
srcs[topology]="tools/cost_model/names.cc tools/cost_model/topology.cc tools/cost_model/topology_file.cc"
libs[topology]=""
srcs[token_cache]="${tensor_srcs[*]} engine/data/text_corpus.cc engine/data/tokenizer.cc
  engine/data/token_cache.cc"
libs[token_cache]="-ltbb -ldnnl -lz -lsentencepiece -lsentencepiece_train"
srcs[checkpoint_json]="engine/io/json_nesting.cc tools/train_lib/checkpoint_json.cc"
libs[checkpoint_json]=""
srcs[state_key]="${tensor_srcs[*]} engine/optim/optimizer.cc"
libs[state_key]="-ltbb -ldnnl"
# The longest input a target is given: 64 KiB, or what its seeds need (a SentencePiece model
# with its normalization table is about 240 KB).
declare -A max_len
max_len[token_cache]=262144

mkdir -p "$out/obj"
# Engine objects: instrumented for coverage (fuzzer-no-link) and the sanitizers, built once for
# all targets, rebuilt when the source or any header is newer.
all_srcs=$(for t in "${targets[@]}"; do echo ${srcs[$t]}; done | tr ' ' '\n' | sort -u)
newest_header=$(find engine kernels tools -name '*.h' -printf '%T@\n' | sort -n | tail -1)
compile() {  # src
  local src=$1 obj="$out/obj/${1//\//_}.o"
  if [[ -f "$obj" ]]; then
    local t
    t=$(stat -c %Y "$obj")
    if [[ $t -ge $(stat -c %Y "$src") && $t -ge ${newest_header%.*} ]]; then return 0; fi
  fi
  echo "fuzz: compiling $src" >&2
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
}
export -f compile
export out CXX newest_header
export CXXFLAGS_S="${CXXFLAGS[*]}"
build_failed=0
for src in $all_srcs; do echo "$src"; done |
  xargs -P "$jobs" -I{} bash -c 'CXXFLAGS=($CXXFLAGS_S); compile {}' || build_failed=1
for t in "${targets[@]}"; do
  objs=()
  for src in ${srcs[$t]}; do objs+=("$out/obj/${src//\//_}.o"); done
  echo "fuzz: linking ${t}_fuzz" >&2
  # shellcheck disable=SC2086
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer "tests/fuzz/${t}_fuzz.cc" "${objs[@]}" ${libs[$t]} \
    -pthread -o "$out/${t}_fuzz" || build_failed=1
done
if ((build_failed)); then
  echo "fuzz: BUILD FAILED"
  exit 1
fi
[[ -n "${FUZZ_BUILD_ONLY:-}" ]] && exit 0

# Leaks are findings too; the readers must free everything they allocate on an error path.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  echo "fuzz: running ${t}_fuzz for ${seconds}s" >&2
  # -rss_limit_mb: a reader that allocates what a header claims is a finding.
  # -timeout: one input taking 10 s is a finding (a hang or quadratic parse).
  log="$out/${t}.log"
  # $out persists between runs: list only this run's reproducers.
  stamp="$out/crashes/$t/.run_start"
  touch "$stamp"
  "$out/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="${max_len[$t]:-65536}" \
    -print_final_stats=1 -artifact_prefix="$out/crashes/$t/" \
    "$out/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  # Inputs a harness could not deliver (tcp_store_fuzz when the machine refuses loopback ports).
  skipped=$(grep -c 'harness: skipped' "$log")
  if [[ $rc -eq 0 ]]; then
    echo "fuzz: ${t}_fuzz: ${execs:-?} inputs in ${seconds}s (${skipped} skipped by the harness), no finding"
  else
    status=1
    echo "fuzz: ${t}_fuzz: FINDING (exit $rc) after ${execs:-?} inputs; log $log, reproducer:"
    find "$out/crashes/$t" -type f -newer "$stamp" -printf '%p\n'
    grep -E 'ERROR|SUMMARY|runtime error|harness|^ *#[0-9]+ ' "$log" | head -30
  fi
done
exit $status
