// comm: the raw copies. Mixed dtypes in one coalesced call, undefined tensors in a reduce-add,
// the bytes each call moves, and that nothing here records autograd.
#include "engine/parallel/comm.h"

#include <gtest/gtest.h>

#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/allocator.h"
#include "engine/device/device_context.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

const Device kH0 = Device::parse("host:0");
const Device kH1 = Device::parse("host:1");
const Device kH2 = Device::parse("host:2");

void use_three_hosts() { set_host_device_count(3); }

Tensor floats(std::vector<float> v, Device d) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, Shape{n}, d);
}

// Four slots of 1 MiB on each of host:0..2; slot i on device d holds i + 10 d everywhere, so the
// sum of slot i over the three devices is 3 i + 30.
constexpr int64_t kSlotFloats = (1 << 20) / 4;
std::vector<std::vector<Tensor>> four_slots_on_each_device() {
  std::vector<std::vector<Tensor>> per_device;
  for (Device d : {kH0, kH1, kH2}) {
    std::vector<Tensor> slots;
    for (int i = 0; i < 4; ++i) {
      slots.push_back(Tensor::full(Shape{kSlotFloats}, static_cast<float>(i + 10 * d.index()), d));
    }
    per_device.push_back(slots);
  }
  return per_device;
}

int64_t copied(Device src, Device dst) {
  const CopyMatrix m = Runtime::get().copy_matrix();
  auto it = m.find({src, dst});
  return it == m.end() ? 0 : it->second;
}

TEST(CommTest, BroadcastCoalescedMixesDtypesInOneCall) {
  use_three_hosts();
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, kH0);
  Tensor count = Tensor::from_vector(std::vector<int64_t>{7, 8, 9}, {3}, kH0);
  Tensor b = floats({5}, kH0);
  const int64_t before = copied(kH0, kH2);
  auto out = comm::broadcast_coalesced({w, count, b}, {kH0, kH2});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[1].size(), 3u);
  EXPECT_EQ(out[0][1].raw_data(), count.raw_data());  // the source device aliases
  EXPECT_EQ(out[1][0].device(), kH2);
  EXPECT_EQ(out[1][0].shape(), Shape({2, 2}));
  EXPECT_EQ(out[1][0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(out[1][1].dtype(), DType::kInt64);
  EXPECT_EQ(out[1][1].to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(out[1][2].to_vector<float>(), (std::vector<float>{5}));
  // Every byte travels once: 5 floats and 3 int64.
  EXPECT_EQ(copied(kH0, kH2) - before, 5 * 4 + 3 * 8);
}

TEST(CommTest, BroadcastCoalescedRefusesTensorsOnSeveralDevices) {
  use_three_hosts();
  EXPECT_THROW(comm::broadcast_coalesced({floats({1}, kH0), floats({2}, kH1)}, {kH2}), Error);
}

TEST(CommTest, ReduceAddCoalescedTreatsUndefinedAsZero) {
  use_three_hosts();
  const std::vector<comm::TensorSpec> specs{{Shape{2}, DType::kFloat32},
                                            {Shape{1}, DType::kFloat32}};
  // Device 1 has no tensor for slot 1, device 2 none at all.
  std::vector<std::vector<Tensor>> per_device{{floats({1, 2}, kH0), floats({3}, kH0)},
                                              {floats({10, 20}, kH1), Tensor()},
                                              {Tensor(), Tensor()}};
  std::vector<Tensor> out = comm::reduce_add_coalesced(per_device, specs, kH2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].device(), kH2);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{3}));
  // A slot no device has is zero when others contributed...
  out = comm::reduce_add_coalesced({{floats({1, 2}, kH1), Tensor()}}, specs, kH0);
  ASSERT_TRUE(out[1].defined());
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{0}));
  // ...and everything is undefined when no device contributed.
  out = comm::reduce_add_coalesced({{Tensor(), Tensor()}, {Tensor(), Tensor()}}, specs, kH0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0].defined());
  EXPECT_FALSE(out[1].defined());
}

TEST(CommTest, ReduceAddCoalescedWorksInChunksOfItsBuffer) {
  use_three_hosts();
  // Four slots of 1 MiB on each of three devices, summed onto device 0 in 1 MiB chunks.
  const int64_t n = kSlotFloats;
  const std::vector<comm::TensorSpec> specs(4, {Shape{n}, DType::kFloat32});
  const std::vector<std::vector<Tensor>> per_device = four_slots_on_each_device();
  Allocator& a0 = Runtime::get().context(kH0).allocator();
  const int64_t before = a0.stats().current_bytes;
  a0.reset_peak();
  std::vector<Tensor> out = comm::reduce_add_coalesced(per_device, specs, kH0, 1 << 20);
  // The four sums (4 MiB) plus one chunk in transit beside the chunk being summed, not every
  // device's whole packed copy (12 MiB).
  EXPECT_LE(a0.stats().peak_bytes - before, 6 << 20);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out[i].to_vector<float>()[n - 1], 3.0f * i + 30.0f) << "slot " << i;
  }
  // Several slots per chunk give the same sums, each in a storage of its own (adoptable as .grad).
  std::vector<Tensor> packed = comm::reduce_add_coalesced(per_device, specs, kH0, 2 << 20);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(packed[i].to_vector<float>(), out[i].to_vector<float>()) << "slot " << i;
    EXPECT_EQ(packed[i].impl_ptr()->storage.use_count(), 1) << "slot " << i;
  }
}

// The sums fold left in device order wherever the destination is, and never share storage with a
// gradient given: (1e8 + 1) - 1e8 is 0 in float, while any other order gives 1.
TEST(CommTest, ReduceAddCoalescedSumsInDeviceOrderIntoStoragesOfItsOwn) {
  use_three_hosts();
  const std::vector<comm::TensorSpec> specs{{Shape{1}, DType::kFloat32},
                                            {Shape{1}, DType::kFloat32}};
  std::vector<std::vector<Tensor>> per_device{{floats({1e8f}, kH0), floats({1e8f}, kH0)},
                                              {floats({1}, kH1), floats({1}, kH1)},
                                              {floats({-1e8f}, kH2), floats({-1e8f}, kH2)}};
  for (int64_t buffer : {int64_t{4}, int64_t{1} << 20}) {  // one slot per chunk, and both in one
    std::vector<Tensor> out = comm::reduce_add_coalesced(per_device, specs, kH1, buffer);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].to_vector<float>(), (std::vector<float>{0})) << "slot " << i;
      EXPECT_EQ(out[i].impl_ptr()->storage.use_count(), 1) << "slot " << i;
      for (const auto& tensors : per_device) {
        EXPECT_NE(out[i].data<float>(), tensors[i].data<float>()) << "slot " << i;
      }
    }
  }
  // The destination's own gradient, alone, comes back as a copy.
  std::vector<Tensor> alone =
      comm::reduce_add_coalesced({{floats({3}, kH1), Tensor()}}, specs, kH1);
  EXPECT_NE(alone[0].data<float>(), per_device[1][0].data<float>());
  EXPECT_EQ(alone[0].to_vector<float>(), (std::vector<float>{3}));
}

// With the destination last, the first device's transferred buffer is summed into in place: the
// destination holds the sums plus one chunk in transit, as when it comes first.
TEST(CommTest, ReduceAddCoalescedOntoTheLastDeviceHoldsOneChunkInTransit) {
  use_three_hosts();
  const int64_t n = kSlotFloats;
  const std::vector<comm::TensorSpec> specs(4, {Shape{n}, DType::kFloat32});
  const std::vector<std::vector<Tensor>> per_device = four_slots_on_each_device();
  Allocator& a2 = Runtime::get().context(kH2).allocator();
  for (int64_t buffer : {int64_t{1} << 20, int64_t{2} << 20}) {
    const int64_t before = a2.stats().current_bytes;
    a2.reset_peak();
    std::vector<Tensor> out = comm::reduce_add_coalesced(per_device, specs, kH2, buffer);
    // The four sums (4 MiB, the chunk's own included) and one chunk in transit.
    EXPECT_LE(a2.stats().peak_bytes - before, (4 << 20) + buffer) << buffer;
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(out[i].to_vector<float>()[n - 1], 3.0f * i + 30.0f) << "slot " << i;
    }
  }
}

TEST(CommTest, ReduceAddCoalescedChecksSlots) {
  use_three_hosts();
  const std::vector<comm::TensorSpec> specs{{Shape{2}, DType::kFloat32}};
  EXPECT_THROW(comm::reduce_add_coalesced({{floats({1, 2, 3}, kH1)}}, specs, kH0), Error);
  EXPECT_THROW(comm::reduce_add_coalesced({{floats({1, 2}, kH1), floats({1}, kH1)}}, specs, kH0),
               Error);
  try {
    comm::reduce_add_coalesced({{Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}, kH1)}},
                               {{Shape{2}, DType::kInt64}}, kH0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only floating tensors can be summed"),
              std::string::npos)
        << e.what();
  }
}

TEST(CommTest, ScatterAndGatherMoveDataAndRecordNothing) {
  use_three_hosts();
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, kH0);
  x.requires_grad_();
  std::vector<Tensor> cols = comm::scatter(x, {kH1, kH2}, {2, 1}, 1);
  EXPECT_EQ(cols[0].device(), kH1);
  EXPECT_EQ(cols[0].to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(cols[1].to_vector<float>(), (std::vector<float>{3, 6}));
  EXPECT_FALSE(cols[0].requires_grad());
  Tensor back = comm::gather(cols, kH0, 1);
  EXPECT_EQ(back.device(), kH0);
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  EXPECT_FALSE(back.requires_grad());
  EXPECT_THROW(comm::gather({floats({1}, kH0), x}, kH0, 0), Error);  // ranks differ
}

}  // namespace
}  // namespace dpe
