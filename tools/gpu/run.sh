#!/usr/bin/env bash
# run.sh [--no-gpu] OUT: everything worth knowing about dpe on this machine's GPU, in under
# 8 minutes, written into OUT (logs, JSON, summary.txt). Run from the unpacked bundle
# (tools/gpu/README.md). Each part has its own time limit, cut to what is left of the whole
# budget, so a failure or hang in one still leaves the others' results:
#
#   env        nvidia-smi, the CPU, and which CUDA libraries were found where
#   libs       every program's libraries resolve (ldd), and check_libs.sh
#   gpu-tests  the GPU tests on 4 logical devices of the GPU (DPE_CUDA_LOGICAL_DEVICES=4)
#   bench-*    bench --device cuda: one model each (mlp, convnet, gpt-small, gpt2), one device
#              and DDP over NCCL with one rank
#   demo       the demo's imbalance table on 2 and 4 logical devices
#   pytorch    the same models in PyTorch eager on the same GPU (pytorch_eager.py)
#   nccl-tests the NCCL tests on the physical GPU (one rank: NCCL refuses two on one GPU)
#   train      train --device cuda: DataParallel on 2 logical devices, then DDP over NCCL
#
# --no-gpu rehearses it on a machine without one: LD_LIBRARY_PATH is the bundle and the CUDA
# libraries found as on the GPU machine, the GPU tests run (and skip, saying why), and bench,
# demo and train run on host devices with small sizes; pytorch runs on the CPU where python3
# has torch (DPE_PYTHON, default python3). Exit 0 when every part that ran passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gpu=1
if [[ ${1:-} == --no-gpu ]]; then
  gpu=0
  shift
fi
out=${1:?usage: run.sh [--no-gpu] OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget=${DPE_GPU_RUN_SECONDS:-420}
start=$(date +%s)
summary="$out/summary.txt"
: >"$summary"
failed=0
data="$here/data/fashion-mnist"
py=${DPE_PYTHON:-python3}  # the Python that has PyTorch
bin="$here/bin"

say() { echo "run.sh: $*" | tee -a "$summary"; }

# part NAME LIMIT CMD...: runs CMD with its output in OUT/NAME.log, for at most LIMIT seconds
# or what is left of the budget, and records how it ended.
part() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    say "$name: not run (the ${budget} s budget is spent)"
    failed=1
    return
  fi
  local t0=$(date +%s) rc
  echo "== $name: $* (limit ${limit} s)" >"$out/$name.log"
  if declare -F "$1" >/dev/null; then
    # A function of this script: run it in a bash of its own, with the state it reads, so that
    # timeout can end it.
    timeout -k 5 "$limit" bash -c "$(declare -p gpu here bin data device logical train_sizes)
      $(declare -f "$1"); $*" >>"$out/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$@" >>"$out/$name.log" 2>&1
  fi
  rc=$?
  local took=$(($(date +%s) - t0))
  if ((rc == 0)); then
    say "$name: passed in ${took} s"
  elif ((rc == 124 || rc == 137)); then
    say "$name: TIMED OUT after ${limit} s"
    failed=1
  else
    say "$name: FAILED (exit $rc) in ${took} s; last lines:"
    tail -n 15 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"
    failed=1
  fi
}

# CUDA's libraries: the bundle carries none (cuda_libs.txt). The first folder holding each wins:
# the toolkit's, the PyTorch wheels' nvidia/*/lib, the driver's, the system's.
cuda_dirs=()
candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
for sp in $("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  candidates+=("$sp"/nvidia/*/lib "$sp"/nvidia/*/lib64)
done
candidates+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
: >"$out/cuda_libs.txt"
while read -r soname; do
  found=""
  for d in "${candidates[@]}"; do
    if [[ -e "$d/$soname" ]]; then
      found=$d
      break
    fi
  done
  echo "$soname ${found:-NOT FOUND}" >>"$out/cuda_libs.txt"
  if [[ -n $found && " ${cuda_dirs[*]} " != *" $found "* ]]; then cuda_dirs+=("$found"); fi
done < <(grep -v '^#' "$here/cuda_libs.txt")
libpath="$here/lib$(printf ':%s' "${cuda_dirs[@]}")"
# The build's libstdc++ only where this machine's is older (a GLIBCXX version it lacks).
if LD_LIBRARY_PATH=$libpath ldd "$bin/bench" 2>&1 | grep -q "GLIBCXX.*not found\|GCC_.*not found"; then
  libpath="$here/lib/compat:$libpath"
fi
export LD_LIBRARY_PATH=$libpath
say "$(cat "$here/VERSION"); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
sed 's/^/run.sh: cuda library /' "$out/cuda_libs.txt" | tee -a "$summary"

env_report() {
  uname -a
  grep -m1 'model name' /proc/cpuinfo
  nproc
  if ((gpu)); then
    nvidia-smi
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  else
    echo "--no-gpu: nvidia-smi not run"
  fi
}

libs_report() {
  local rc=0
  for p in "$bin"/*; do
    echo "== $p"
    ldd "$p"
    if ldd "$p" | grep -q "not found"; then rc=1; fi
  done
  "$here/check_libs.sh" "$here" || rc=1
  return $rc
}

if ((gpu)); then
  device=cuda
  logical=(env DPE_CUDA_LOGICAL_DEVICES=4)
  bench_sizes=(--devices 1 --warmup 3 --steps 10)
  bench_models=("mlp 256" "convnet 256" "gpt-small 8" "gpt2 8")
  demo_flags=(--device cuda --devices 4 --lm-devices 2,4 --data-dir "$data")
  train_sizes=(--epochs 1 --max-steps 100 --data-dir "$data")
else
  device=host
  logical=(env)
  bench_sizes=(--devices 1,2 --warmup 1 --steps 2)
  bench_models=("mlp 64" "convnet 64" "gpt-small 2")
  demo_flags=(--devices 2 --lm-devices 2 --lm-steps 1 --lm-batch-size 1 --steps 2 --data-dir "$data")
  train_sizes=(--epochs 1 --max-steps 3 --data-dir "$data")
fi

part env 20 env_report
part libs 20 libs_report

part gpu-tests 150 "${logical[@]}" "$bin/gpu_tests" \
  --gtest_filter='-DdpNcclTest.*:NcclProcessGroupTest.*' --gtest_output="xml:$out/gpu_tests.xml"

for mb in "${bench_models[@]}"; do
  read -r model batch <<<"$mb"
  part "bench-$model" 75 "$bin/bench" --device "$device" --models "$model" --batch-size "$batch" \
    "${bench_sizes[@]}" --data-dir "$data" --json "$out/bench-$model.json" \
    --svg "$out/bench-$model.svg"
done

part demo 100 "${logical[@]}" "$bin/demo" "${demo_flags[@]}"

if "$py" -c 'import torch' 2>/dev/null; then
  if ((gpu)); then
    part pytorch 110 "$py" "$here/pytorch_eager.py" --data-dir "$data" --json "$out/pytorch.json"
  else
    part pytorch 110 "$py" "$here/pytorch_eager.py" --device cpu --models mlp,convnet,gpt-small \
      --batch-size mlp=64,convnet=32,gpt-small=1 --warmup 0 --steps 1 --data-dir "$data" \
      --json "$out/pytorch.json"
  fi
else
  say "pytorch: not run ($py has no torch here; DPE_PYTHON names another Python)"
fi

part nccl-tests 60 "$bin/gpu_tests" --gtest_filter='DdpNcclTest.*:NcclProcessGroupTest.*' \
  --gtest_output="xml:$out/nccl_tests.xml"

train_all() {
  "${logical[@]}" DPE_CUDA_LOGICAL_DEVICES=2 "$bin/train" --device "$device" --mode dp \
    --devices 2 --model convnet "${train_sizes[@]}" --no-progress || return
  if ((gpu)); then
    "$bin/launch" --nproc_per_node=1 "$bin/train" --device cuda --mode ddp --backend nccl \
      --model convnet "${train_sizes[@]}" --no-progress
  else
    "$bin/launch" --nproc_per_node=2 "$bin/train" --mode ddp --backend gloo --model convnet \
      "${train_sizes[@]}" --no-progress
  fi
}
part train 60 train_all

say "done in $(($(date +%s) - start)) s: $([[ $failed == 0 ]] && echo 'every part passed' || echo 'some parts FAILED')"
exit $failed
