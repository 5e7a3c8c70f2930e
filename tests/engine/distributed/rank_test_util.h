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
  RANK_CHECK(e.find("avg needs float32") != std::string::npos, e);
  e = error_of([&] { pg.broadcast(t, 3); });
  RANK_CHECK(e.find("root 3") != std::string::npos, e);
  std::vector<Tensor> wrong(2);
  e = error_of([&] { pg.all_gather(t, wrong); });
  RANK_CHECK(e.find("expected 1 output") != std::string::npos, e);
  pg.all_reduce(t);  // still usable after usage errors
}

// One host device (one compute thread) in this process, and the default group of `size` ranks
// through the TCPStore that the test process serves on `port`. Short timeouts: a failure is an
// error within seconds, never a hang.
inline std::shared_ptr<distributed::ProcessGroup> join_job(
    int port, int rank, int size,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  HostDeviceOptions host;
  host.count = 1;
  host.compute_threads = 1;
  Runtime::get().set_host_devices(host);
  auto store = std::make_shared<distributed::TCPStore>("127.0.0.1", port, false, timeout);
  return distributed::init_process_group("gloo", store, size, rank, timeout);
}

}  // namespace dpe::test
