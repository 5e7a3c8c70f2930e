#include "engine/parallel/scatter.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/parallel/gather.h"

namespace dpe {
namespace {

std::vector<Device> hosts(int n) {
  set_host_device_count(std::max(n, 2));
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

std::vector<int64_t> sizes_for(int64_t batch, int devices) {
  Scattered s = scatter(Value(Tensor::zeros({batch, 5})), hosts(devices), 0);
  std::vector<int64_t> out;
  for (size_t k = 0; k < s.chunks.size(); ++k) {
    EXPECT_EQ(s.chunks[k].tensor().device(), s.devices[k]);
    EXPECT_EQ(s.chunks[k].tensor().size(0), s.sizes[k]);
    out.push_back(s.sizes[k]);
  }
  return out;
}

TEST(ScatterTest, ChunkSizesFollowTorchChunkAndUseOnlyTheFirstDevices) {
  EXPECT_EQ(sizes_for(30, 2), (std::vector<int64_t>{15, 15}));
  EXPECT_EQ(sizes_for(10, 2), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(sizes_for(10, 3), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(sizes_for(5, 4), (std::vector<int64_t>{2, 2, 1}));  // only 3 devices used
  EXPECT_EQ(sizes_for(1, 3), (std::vector<int64_t>{1}));        // batch smaller than devices
  EXPECT_EQ(sizes_for(2, 4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes_for(7, 1), (std::vector<int64_t>{7}));
}

TEST(ScatterTest, WeightedSizesGiveDeviceZeroLess) {
  EXPECT_EQ(weighted_chunk_sizes(30, {0.5, 1.0}), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(weighted_chunk_sizes(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(weighted_chunk_sizes(256, {0, 1}), (std::vector<int64_t>{0, 256}));
  std::vector<int64_t> s{10, 20};
  Scattered sc = scatter(Value(Tensor::zeros({30, 2})), hosts(2), 0, &s);
  EXPECT_EQ(sc.chunks[0].tensor().size(0), 10);
  std::vector<int64_t> skip{0, 30};
  sc = scatter(Value(Tensor::zeros({30, 2})), hosts(2), 0, &skip);
  ASSERT_EQ(sc.devices.size(), 1u);
  EXPECT_EQ(sc.devices[0], Device::parse("host:1"));
  std::vector<int64_t> bad{10, 10};
  EXPECT_THROW(scatter(Value(Tensor::zeros({30, 2})), hosts(2), 0, &bad), Error);
}

TEST(ScatterTest, ListsDictsAndNonTensorsAreSplitAlike) {
  Value in(ValueDict{{"x", Tensor::zeros({6, 3})},
                     {"pair", ValueList{Tensor::zeros({6}), Value(2.5)}},
                     {"mode", Value("train")}});
  Scattered s = scatter(in, hosts(2), 0);
  ASSERT_EQ(s.chunks.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const Value& c = s.chunks[k];
    EXPECT_EQ(c.at("x").tensor().shape(), Shape({3, 3}));
    EXPECT_EQ(c.at("x").tensor().device(), s.devices[k]);
    EXPECT_EQ(c.at("pair").list()[0].tensor().shape(), Shape({3}));
    EXPECT_EQ(c.at("pair").list()[1].get<double>(), 2.5);
    EXPECT_EQ(c.at("mode").get<std::string>(), "train");
  }
}

// As PyTorch's: each device's chunk keeps the batch's layout, channels last included.
TEST(ScatterTest, AChannelsLastBatchStaysChannelsLastOnEveryDevice) {
  const Tensor x = Tensor::from_vector(std::vector<float>(5 * 3 * 2 * 2, 1.0f), {5, 3, 2, 2})
                       .contiguous(MemoryFormat::kChannelsLast);
  Scattered s = scatter(Value(x), hosts(2), 0);
  ASSERT_EQ(s.chunks.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const Tensor& t = s.chunks[k].tensor();
    EXPECT_EQ(t.device(), s.devices[k]);
    EXPECT_TRUE(t.is_contiguous(MemoryFormat::kChannelsLast)) << t.str();
    EXPECT_EQ(t.suggest_memory_format(), MemoryFormat::kChannelsLast);
  }
  const Tensor y = Tensor::zeros({5, 3, 2, 2});  // a contiguous batch stays contiguous
  for (const Value& chunk : scatter(Value(y), hosts(2), 0).chunks) {
    EXPECT_TRUE(chunk.tensor().is_contiguous());
  }
}

TEST(ScatterTest, InputMayLiveOnAnyDevice) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4, 1}, Device::parse("host:1"));
  Scattered s = scatter(Value(x), hosts(2), 0);
  EXPECT_EQ(s.chunks[0].tensor().device(), Device::parse("host:0"));
  EXPECT_EQ(s.chunks[0].tensor().to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(s.chunks[1].tensor().to_vector<float>(), (std::vector<float>{3, 4}));
}

TEST(ScatterTest, AnEmptyBatchGivesEveryDeviceAnEmptyChunk) {
  // As torch.chunk and PyTorch's scatter: k empty pieces, and the module runs on each.
  EXPECT_EQ(chunk_sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  Scattered s = scatter(Value(Tensor::zeros({0, 3})), hosts(2), 0);
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.devices, hosts(2));
  EXPECT_EQ(s.chunks[1].tensor().shape(), Shape({0, 3}));
  EXPECT_EQ(s.chunks[1].tensor().device(), Device::parse("host:1"));
}

TEST(ScatterTest, ErrorsNameTheProblem) {
  try {
    scatter(Value(ValueList{Tensor::zeros({4, 3}), Tensor::zeros({5, 3})}), hosts(2), 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same size along dim 0"), std::string::npos) << e.what();
  }
}

TEST(ScatterGatherTest, GradientsFlowBackThroughScatterAndGather) {
  auto devices = hosts(3);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {5, 1});
  x.requires_grad_();
  Scattered s = scatter(Value(x), devices, 0);
  std::vector<Value> outs;
  for (const Value& c : s.chunks) outs.push_back(Value(ops::mul(c.tensor(), c.tensor())));
  Tensor y = gather(outs, devices[0], 0).tensor();
  EXPECT_EQ(y.device(), devices[0]);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 4, 9, 16, 25}));
  backward(ops::sum(y));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10}));
}

}  // namespace
}  // namespace dpe
