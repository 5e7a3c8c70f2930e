// Helpers for tests whose ranks run in forked processes (spawn): checks that throw (gtest's
// assertions would not reach the parent), joining a default group through the test's TCPStore
// with one host device per process, and a relative error for comparing runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/tcp_store.h"
#include "engine/tensor/tensor.h"
#include "tests/util/compare.h"

namespace dpe::test {

// For checks inside a rank's process: spawn reports the message with the rank.
#define RANK_CHECK(cond, msg) \
  DPE_CHECK(cond, __FILE__ << ":" << __LINE__ << ": " << #cond << ": " << msg)

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Checks a float32 tensor's values elementwise (within 1e-5), naming `what` and the element.
inline void expect_values(const Tensor& t, const std::vector<float>& expected,
                          const std::string& what) {
  const auto got = t.to_vector<float>();
  RANK_CHECK(got.size() == expected.size(), what);
  for (size_t i = 0; i < got.size(); ++i) {
    RANK_CHECK(std::abs(got[i] - expected[i]) < 1e-5f,
               what << ": element " << i << " is " << got[i] << ", expected " << expected[i]);
  }
}

// A group of one rank: avg over one rank is the tensor itself, a barrier returns, and every
// argument error is named (non-contiguous tensor, avg of int64, root out of range, wrong output
// count) without breaking the group, which still all-reduces afterwards.
inline void expect_one_rank_and_argument_errors(distributed::ProcessGroup& pg) {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2});
  pg.all_reduce(t, distributed::ReduceOp::kAvg);
  expect_values(t, {1.0f, 2.0f}, "avg over one rank");
  pg.barrier();
  Tensor m = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = m.permute({1, 0});
  std::string e = error_of([&] { pg.all_reduce(transposed); });
  RANK_CHECK(e.find("contiguous") != std::string::npos, e);
  Tensor ints = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2});
  e = error_of([&] { pg.all_reduce(ints, distributed::ReduceOp::kAvg); });
  RANK_CHECK(e.find("avg needs a floating dtype") != std::string::npos, e);
  e = error_of([&] { pg.broadcast(t, 3); });
  RANK_CHECK(e.find("root 3") != std::string::npos, e);
  std::vector<Tensor> wrong(2);
  e = error_of([&] { pg.all_gather(t, wrong); });
  RANK_CHECK(e.find("expected 1 output") != std::string::npos, e);
  pg.all_reduce(t);  // still usable after usage errors
}

// Every reduce op on float32 (sum, avg, max, min) and int64 (sum, max, min), and a 2.4 MB tensor
// (beyond Gloo's 1 MiB segment and the MPI shared-memory transport's eager limit), checked on
// each rank of `pg` against the values every rank's inputs give.
inline void expect_all_reduce_ops(distributed::ProcessGroup& pg) {
  using distributed::ReduceOp;
  const int n = pg.size(), rank = pg.rank();
  const auto input = [&] {
    return Tensor::from_vector(std::vector<float>{float(rank + 1), float(-rank), 0.5f * rank, 7.0f},
                               {2, 2});
  };
  float sum1 = 0, sum2 = 0, sum3 = 0;
  for (int q = 0; q < n; ++q) {
    sum1 += q + 1;
    sum2 += -q;
    sum3 += 0.5f * q;
  }
  Tensor t = input();
  pg.all_reduce(t);
  expect_values(t, {sum1, sum2, sum3, 7.0f * n}, "sum");
  t = input();
  pg.all_reduce(t, ReduceOp::kAvg);
  expect_values(t, {sum1 / n, sum2 / n, sum3 / n, 7.0f}, "avg");
  t = input();
  pg.all_reduce(t, ReduceOp::kMax);
  expect_values(t, {float(n), 0.0f, 0.5f * (n - 1), 7.0f}, "max");
  t = input();
  pg.all_reduce(t, ReduceOp::kMin);
  expect_values(t, {1.0f, float(-(n - 1)), 0.0f, 7.0f}, "min");

  Tensor i = Tensor::from_vector(std::vector<int64_t>{rank, 10 * rank}, {2});
  pg.all_reduce(i);
  const auto iv = i.to_vector<int64_t>();
  RANK_CHECK(iv[0] == n * (n - 1) / 2 && iv[1] == 10 * n * (n - 1) / 2, "int64 sum");
  i = Tensor::from_vector(std::vector<int64_t>{rank, -rank}, {2});
  pg.all_reduce(i, ReduceOp::kMax);
  RANK_CHECK(i.to_vector<int64_t>()[0] == n - 1 && i.to_vector<int64_t>()[1] == 0, "int64 max");
  i = Tensor::from_vector(std::vector<int64_t>{rank, -rank}, {2});
  pg.all_reduce(i, ReduceOp::kMin);
  RANK_CHECK(i.to_vector<int64_t>()[0] == 0 && i.to_vector<int64_t>()[1] == -(n - 1), "int64 min");

  // 16-bit floats travel as 2 bytes and are summed in float32 per hop: exact on small integers;
  // a value with more bits than bfloat16 keeps its rounding (1 + 2^-8 stays 1).
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    Tensor h = input().to(dt);
    pg.all_reduce(h);
    expect_values(h.to(DType::kFloat32), {sum1, sum2, sum3, 7.0f * n}, dtype_name(dt));
    h = input().to(dt);
    pg.all_reduce(h, ReduceOp::kMax);
    expect_values(h.to(DType::kFloat32), {float(n), 0.0f, 0.5f * (n - 1), 7.0f}, "16-bit max");
    h = Tensor::full({3}, 1.0f + 0x1p-8f).to(DType::kBFloat16);
    pg.all_reduce(h, ReduceOp::kAvg);
    expect_values(h.to(DType::kFloat32), {1.0f, 1.0f, 1.0f}, "bfloat16 avg");
  }

  Tensor big = Tensor::full({600000}, float(rank));
  pg.all_reduce(big);
  const auto bv = big.to_vector<float>();
  RANK_CHECK(bv.front() == n * (n - 1) / 2.0f && bv.back() == n * (n - 1) / 2.0f, "big");
}

// Broadcast from every root (float32, and int64 with high bits set), all_gather into a fresh
// list and into given tensors, checked on each rank of `pg`.
inline void expect_broadcast_and_all_gather(distributed::ProcessGroup& pg) {
  const int n = pg.size(), rank = pg.rank();
  for (int root = 0; root < n; ++root) {
    Tensor t = Tensor::full({3}, float(10 * rank + 1));
    pg.broadcast(t, root);
    expect_values(t, std::vector<float>(3, float(10 * root + 1)),
                  "broadcast from " + std::to_string(root));
  }
  Tensor ints = Tensor::from_vector(std::vector<int64_t>{int64_t(rank) << 40}, {1});
  pg.broadcast(ints, n - 1);
  RANK_CHECK(ints.to_vector<int64_t>()[0] == int64_t(n - 1) << 40, "int64 broadcast");

  Tensor mine = Tensor::from_vector(std::vector<float>{float(rank), float(rank * rank)}, {2});
  std::vector<Tensor> gathered;
  pg.all_gather(mine, gathered);
  RANK_CHECK(static_cast<int>(gathered.size()) == n,
             "all_gather made " << gathered.size() << " outputs");
  for (int q = 0; q < n; ++q) {
    expect_values(gathered[q], {float(q), float(q * q)}, "all_gather from " + std::to_string(q));
  }
  std::vector<Tensor> preallocated;
  for (int q = 0; q < n; ++q) preallocated.push_back(Tensor::zeros({2}));
  pg.all_gather(mine, preallocated);
  expect_values(preallocated[n - 1], {float(n - 1), float((n - 1) * (n - 1))},
                "all_gather into given tensors");
}

// One host device (one compute thread) in this process, and the default group of `size` ranks
// through the TCPStore that the test process serves on `port`. Short timeouts: a failure is an
// error within seconds, never a hang.
// all_gather_into_tensor and reduce_scatter_tensor (sum and avg, a chunk per rank) on each rank
// of `pg`, and the size checks that name the rank.
inline void expect_flat_collectives(distributed::ProcessGroup& pg) {
  const int n = pg.size(), rank = pg.rank();
  Tensor mine = Tensor::from_vector(std::vector<float>{float(rank), float(10 * rank)}, {2});
  Tensor all = Tensor::zeros({2 * n});
  pg.all_gather_into_tensor(all, mine);
  std::vector<float> expected;
  for (int q = 0; q < n; ++q) {
    expected.push_back(float(q));
    expected.push_back(float(10 * q));
  }
  expect_values(all, expected, "all_gather_into_tensor");
  // Rank q contributes q + i at element i; rank r keeps elements [3r, 3r + 3).
  std::vector<float> input(static_cast<size_t>(3 * n));
  for (size_t i = 0; i < input.size(); ++i) input[i] = float(rank) + float(i);
  const float ranks_sum = n * (n - 1) / 2.0f;
  for (auto op : {distributed::ReduceOp::kSum, distributed::ReduceOp::kAvg}) {
    Tensor out = Tensor::zeros({3});
    pg.reduce_scatter_tensor(out, Tensor::from_vector(input, {3 * n}), op);
    std::vector<float> want;
    for (int i = 3 * rank; i < 3 * rank + 3; ++i) {
      const float sum = ranks_sum + float(n * i);
      want.push_back(op == distributed::ReduceOp::kSum ? sum : sum / n);
    }
    expect_values(out, want, std::string("reduce_scatter ") + distributed::reduce_op_name(op));
  }
  Tensor wrong = Tensor::zeros({2});
  std::string e = error_of([&] { pg.reduce_scatter_tensor(wrong, Tensor::zeros({2 * n + 1})); });
  RANK_CHECK(e.find("reduce_scatter_tensor (rank " + std::to_string(rank)) != std::string::npos,
             e);
  e = error_of([&] { pg.all_gather_into_tensor(wrong, mine); });
  RANK_CHECK(n == 1 || e.find("all_gather_into_tensor") != std::string::npos, e);
}

inline std::shared_ptr<distributed::ProcessGroup> join_job(
    int port, int rank, int size,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  HostDeviceOptions host;
  host.count = 1;
  host.compute_threads = 1;
  set_host_devices(host);
  auto store = std::make_shared<distributed::TCPStore>("127.0.0.1", port, false, timeout);
  return distributed::init_process_group("gloo", store, size, rank, timeout);
}

}  // namespace dpe::test
