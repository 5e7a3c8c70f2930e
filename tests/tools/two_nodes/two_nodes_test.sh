#!/usr/bin/env bash
# Two nodes for real: two network namespaces of this machine ("node 0", "node 1"), each with its
# own address, joined through a third namespace where delay_bridge passes frames between them
# (with a delay when asked: these kernels have no netem). A two-node DDP job runs across them with
# the launcher (--nnodes 2 --node-rank, rendezvous on node 0), then:
#   latency: 20 ms each way between the nodes: the job finishes with the same losses;
#   kill:    node 1's launcher is killed (SIGKILL) mid-training;
#   cut:     the link goes down mid-training;
# in the last two every process on both nodes ends within the collective timeout with a message
# naming the lost rank, no worker is left, and no port is left bound. Skips, saying why, where
# network namespaces cannot be made (not root, no CAP_NET_ADMIN).
#   two_nodes_test.sh LAUNCH TRAIN DELAY_BRIDGE
set -u
LAUNCH=$(realpath "$1") TRAIN=$(realpath "$2") BRIDGE=$(realpath "$3")
TIMEOUT_S=6            # the job's collective timeout (train --timeout)
WITHIN_S=$((TIMEOUT_S + 25))  # every process gone by then
TAG=$$
N0=dpe2n-$TAG-0 N1=dpe2n-$TAG-1 NM=dpe2n-$TAG-m
NET=10.$((200 + TAG % 50)).$((TAG % 250)).0
ADDR0=${NET%.0}.1 ADDR1=${NET%.0}.2
OUT=${TEST_TMPDIR:-/tmp}/two_nodes.$TAG
mkdir -p "$OUT"
BRIDGE_PID=
FAILED=0

cleanup() {
  [ -n "$BRIDGE_PID" ] && kill "$BRIDGE_PID" 2>/dev/null
  for ns in "$N0" "$N1" "$NM"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; FAILED=1; }

if ! err=$(ip netns add "$N0" 2>&1); then
  echo "SKIP: cannot make network namespaces here ($err); the two-node test needs root"
  exit 0
fi
ip netns add "$N1" && ip netns add "$NM" || { echo "FAIL: ip netns add"; exit 1; }
ip link add v0 netns "$N0" type veth peer name m0 netns "$NM" &&
  ip link add v1 netns "$N1" type veth peer name m1 netns "$NM" &&
  ip -n "$N0" addr add "$ADDR0/24" dev v0 && ip -n "$N1" addr add "$ADDR1/24" dev v1 || {
  echo "FAIL: veth setup"; exit 1; }
for x in "$N0 v0" "$N1 v1" "$NM m0" "$NM m1" "$N0 lo" "$N1 lo"; do
  set -- $x
  ip -n "$1" link set "$2" up
done

start_bridge() {  # DELAY_MS
  [ -n "$BRIDGE_PID" ] && kill "$BRIDGE_PID" 2>/dev/null && wait "$BRIDGE_PID" 2>/dev/null
  ip -n "$NM" link set m0 up
  ip -n "$NM" link set m1 up
  ip netns exec "$NM" "$BRIDGE" m0 m1 "$1" &
  BRIDGE_PID=$!
  sleep 0.3
}

# A marker no other process has, to find this job's workers.
MARK=$((40000 + TAG % 20000))
PORT=$((20000 + TAG % 20000))

# Starts both launchers in the background: NAME EPOCHS
start_job() {
  local name=$1 epochs=$2
  for rank in 0 1; do
    local ns=$N0
    [ "$rank" = 1 ] && ns=$N1
    ip netns exec "$ns" env DPE_STORE_TOKEN=two-nodes-$TAG \
      "$LAUNCH" --nnodes 2 --node-rank "$rank" --nproc-per-node 1 \
      --rdzv-endpoint "$ADDR0:$PORT" --rdzv-id "two-nodes-$name" \
      "$TRAIN" --mode ddp --backend gloo --model toy --train-samples "$MARK" --test-samples 64 \
      --max-steps-per-epoch 5 --batch-size 64 --epochs "$epochs" --no-progress --timeout "$TIMEOUT_S" \
      >"$OUT/$name.node$rank.log" 2>&1 &
    eval "PID_$rank=$!"
  done
}

# Waits up to SECONDS for both launchers; sets RC_0 and RC_1 (124: still running, then killed).
wait_job() {
  local deadline=$((SECONDS + $1))
  for rank in 0 1; do
    local pid
    eval "pid=\$PID_$rank"
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null
      eval "RC_$rank=124"
    else
      wait "$pid"
      eval "RC_$rank=$?"
    fi
  done
}

no_leftovers() {  # NAME
  sleep 1
  local left
  left=$(pgrep -f -- "--train-samples $MARK " | tr '\n' ' ')
  [ -z "$left" ] || fail "$1: workers left: $left"
  for ns in "$N0" "$N1"; do
    local bound
    bound=$(ip netns exec "$ns" ss -Htanl 2>/dev/null)
    [ -z "$bound" ] || fail "$1: ports left bound in $ns: $bound"
  done
}

losses() { grep -o 'train loss [0-9.]*, test loss [0-9.]*' "$1"; }

# Waits until node 0 has finished EPOCH (its log says so), up to 60 s.
wait_epoch() {
  local until=$((SECONDS + 60))
  while ! grep -qs "epoch $1:" "$OUT/$2.node0.log" && [ "$SECONDS" -lt "$until" ]; do sleep 0.1; done
}

echo "== baseline: no delay"
start_bridge 0
start_job baseline 3
wait_job 120
[ "$RC_0" = 0 ] && [ "$RC_1" = 0 ] || fail "baseline: exit codes $RC_0 $RC_1"
cat "$OUT/baseline.node0.log"

echo "== latency: 20 ms each way"
start_bridge 20
start_job latency 3
wait_job 240
[ "$RC_0" = 0 ] && [ "$RC_1" = 0 ] || fail "latency: exit codes $RC_0 $RC_1"
if [ "$(losses "$OUT/latency.node0.log")" != "$(losses "$OUT/baseline.node0.log")" ] ||
  [ -z "$(losses "$OUT/baseline.node0.log")" ]; then
  fail "latency: losses differ from the baseline's"
fi
cat "$OUT/latency.node0.log"
no_leftovers latency

echo "== kill: node 1's launcher killed mid-training"
start_bridge 0
start_job kill 100000
wait_epoch 2 kill
kill -9 "$PID_1"
T0=$SECONDS
wait_job "$WITHIN_S"
echo "node 0 ended with $RC_0 after $((SECONDS - T0)) s"
[ "$RC_0" != 0 ] && [ "$RC_0" != 124 ] || fail "kill: node 0 exit code $RC_0"
grep -q "rank 1" "$OUT/kill.node0.log" || fail "kill: node 0's output does not name rank 1"
tail -n 5 "$OUT/kill.node0.log"
no_leftovers kill

echo "== cut: the link goes down mid-training"
start_bridge 0
start_job cut 100000
wait_epoch 2 cut
ip -n "$NM" link set m1 down
T0=$SECONDS
wait_job "$WITHIN_S"
echo "nodes ended with $RC_0 $RC_1 after $((SECONDS - T0)) s"
for rank in 0 1; do
  eval "rc=\$RC_$rank"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "cut: node $rank exit code $rc"
done
grep -q "rank 1" "$OUT/cut.node0.log" || fail "cut: node 0's output does not name rank 1"
grep -q "rank 0" "$OUT/cut.node1.log" || fail "cut: node 1's output does not name rank 0"
tail -n 5 "$OUT/cut.node0.log" "$OUT/cut.node1.log"
no_leftovers cut

[ "$FAILED" = 0 ] && echo "PASS" || echo "FAILED"
exit "$FAILED"
