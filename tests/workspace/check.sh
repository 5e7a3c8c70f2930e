#!/usr/bin/env bash
# The workspace check: another Bazel workspace uses dpe as a user's would. It creates one in a
# temporary folder whose WORKSPACE pulls dpe in with local_repository and dpe_dependencies()
# (bazel/deps.bzl), builds a one-file program on @dpe//:dpe that takes one DataParallel step on
# two host devices, runs it and checks what it prints, that the engine was built as dpe builds
# itself (bazel/dpe.bazelrc: optimised, -march=native) and that the build printed no sandbox debug
# log. Its own Bazel server and output base live in the temporary folder, so the engine is built
# from nothing there; both go when it ends.
# Prints "workspace: ok" or "workspace: FAILED" last (.ci/run counts it). Arguments go to
# `bazel build` and `bazel aquery` (e.g. --disk_cache= to build without the machine's disk cache).
# Not a Bazel test: Bazel inside a Bazel test's sandbox is fragile.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

# Bazel and the system libraries dpe links, installed when missing.
"$root/tools/bazelw" --version >/dev/null || { echo "workspace: FAILED"; exit 1; }

tmp=$(mktemp -d /tmp/dpe_workspace.XXXXXX)
ws="$tmp/app"
# The server exits on its own should this script be killed before it shuts it down.
bazel=(bazel --output_base="$tmp/output_base" --max_idle_secs=300)
cleanup() {
  (cd "$ws" 2>/dev/null && "${bazel[@]}" shutdown >/dev/null 2>&1)
  chmod -R u+w "$tmp" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# What a user writes: WORKSPACE, .bazelrc, a BUILD file and the program (README: "Using dpe from
# your own Bazel workspace").
mkdir -p "$ws"
cat >"$ws/WORKSPACE" <<EOF
local_repository(name = "dpe", path = "$root")

load("@dpe//bazel:deps.bzl", "dpe_dependencies")

dpe_dependencies()
EOF
cat >"$ws/.bazelrc" <<EOF
import $root/bazel/dpe.bazelrc
EOF
cat >"$ws/BUILD" <<'EOF'
cc_binary(
    name = "one_step",
    srcs = ["one_step.cc"],
    deps = ["@dpe//:dpe"],
)
EOF
cat >"$ws/one_step.cc" <<'EOF'
// One DataParallel step of a Linear(4, 1) on two host devices.
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/nn/linear.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"

int main() {
  dpe::set_host_device_count(2);
  dpe::Generator gen(0);
  auto model = std::make_shared<dpe::nn::Linear>(4, 1, gen);
  std::vector<dpe::Device> devices = {dpe::Device::parse("host:0"), dpe::Device::parse("host:1")};
  dpe::DataParallel net(model, devices);
  dpe::optim::SgdOptions options;
  options.lr = 0.1f;
  dpe::optim::SGD sgd(model->parameters(), options);

  const dpe::Tensor x = dpe::randn({8, 4}, gen), y = dpe::randn({8, 1}, gen);
  dpe::Tensor loss = dpe::ops::mse_loss(net(x), y);
  dpe::backward(loss);
  sgd.step();
  const float after = dpe::ops::mse_loss(net(x), y).item();
  std::printf("one DataParallel step on %zu devices: loss %.4f -> %.4f\n", devices.size(),
              loss.item(), after);
  return after < loss.item() ? 0 : 1;
}
EOF

# Every compilation of dpe's own files in the target configuration carries the optimised build's
# flags: Bazel's opt mode (-O2, -DNDEBUG) and dpe's -march=native. The action graph says what the
# build ran, disk cache or not.
check_optimised() {
  (cd "$ws" && "${bazel[@]}" aquery "$@" --output=text \
    'mnemonic("CppCompile", deps(//:one_step))') >"$tmp/aquery.txt" 2>"$tmp/aquery.log" || {
    tail -n 20 "$tmp/aquery.log"
    return 1
  }
  local counts  # \047 is a quote: aquery writes some flags quoted
  counts=$(awk '
    function flush() {
      if (dpe && !exec) { n++; if (o2 && ndebug && native) ok++ }
      dpe = exec = o2 = ndebug = native = 0
    }
    /^action /                   { flush() }
    /^  Target: @dpe\/\//        { dpe = 1 }
    /^  Configuration: /         { if ($2 ~ /exec|host/) exec = 1 }
    /^    \047?-O2\047? /           { o2 = 1 }
    /^    \047?-DNDEBUG\047? /      { ndebug = 1 }
    /^    \047?-march=native\047? / { native = 1 }
    END { flush(); print n + 0, ok + 0 }' "$tmp/aquery.txt")
  local n=${counts% *} ok=${counts#* }
  echo "workspace: $ok of $n compilations of dpe's files optimised (-O2 -DNDEBUG -march=native)"
  [[ $n -gt 0 && $ok -eq $n ]]
}

# Debian's Bazel runs linux-sandbox with --sandbox_debug (/etc/bazel/bazelrc), which prints its
# log on every action unless the build picks dpe's processwrapper-sandbox.
check_quiet_sandbox() {
  local lines
  lines=$(grep -c 'src/main/tools/linux-sandbox' "$tmp/build.log")
  echo "workspace: $lines lines of linux-sandbox debug output in the build"
  [[ $lines -eq 0 ]]
}

start=$(date +%s)
status=0
if (cd "$ws" && "${bazel[@]}" build "$@" //:one_step) >"$tmp/build.log" 2>&1
then
  echo "workspace: @dpe//:dpe and the program built in $(($(date +%s) - start)) s (own output base)"
  out=$("$ws/bazel-bin/one_step" 2>&1) || status=1
  echo "$out"
  [[ "$out" =~ one\ DataParallel\ step\ on\ 2\ devices:\ loss\ [0-9.]+\ -\>\ [0-9.]+ ]] || status=1
  check_optimised "$@" || status=1
  check_quiet_sandbox || status=1
else
  tail -n 40 "$tmp/build.log"
  status=1
fi
if [[ $status -eq 0 ]]; then echo "workspace: ok"; else echo "workspace: FAILED"; fi
exit $status
