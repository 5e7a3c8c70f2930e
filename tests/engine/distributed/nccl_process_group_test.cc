// NcclProcessGroup on one rank (a HashStore, no network): the collectives' results and argument
// errors. Skips without a GPU (nccl_unavailable_test covers that case).
#include "engine/distributed/nccl_process_group.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe::distributed {
namespace {

const Device kCuda0 = Device::parse("cuda:0");

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclProcessGroupTest, OneRankCollectives) {
  if (Runtime::get().device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device";
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  NcclProcessGroup pg(store, 0, 1, kCuda0);
  EXPECT_EQ(pg.backend(), "nccl");

  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, kCuda0);
  pg.all_reduce(t, ReduceOp::kSum);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  pg.all_reduce(t, ReduceOp::kAvg);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor i = Tensor::from_vector(std::vector<int64_t>{4, 5}, {2}, kCuda0);
  pg.all_reduce(i, ReduceOp::kMax);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  pg.broadcast(t, 0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));

  std::vector<Tensor> outs;
  pg.all_gather(t, outs);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  pg.barrier();

  Tensor on_host = Tensor::ones({2});
  const std::string msg = error_of([&] { pg.all_reduce(on_host); });
  EXPECT_NE(msg.find("expected a tensor on cuda:0"), std::string::npos) << msg;
  const std::string avg = error_of([&] { pg.all_reduce(i, ReduceOp::kAvg); });
  EXPECT_NE(avg.find("op avg needs a floating dtype"), std::string::npos) << avg;
}

}  // namespace
}  // namespace dpe::distributed
