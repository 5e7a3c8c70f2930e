// Without a GPU (or without CUDA in the build): choosing cuda:0 fails naming why, host devices
// stay the default (skipped where a GPU is present), and the CUDA op table is registered exactly
// where CUDA is built, with 16-bit kernels for the prims the host has them for.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
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

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CudaBackendNoGpuTest, ChoosingCuda0FailsClearlyAndTheHostStaysTheDefault) {
  if (Runtime::get().device_count(DeviceType::kCuda) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  const std::string msg = error_of([] {
    Tensor::zeros({2, 3}, DType::kFloat32, Device::parse("cuda:0"));
  });
  EXPECT_TRUE(contains(msg, "cuda:0 is not available")) << msg;
  EXPECT_TRUE(contains(msg, "host devices remain the default")) << msg;

  // Factories without a device make host tensors, and the host's table runs their prims.
  Tensor t = Tensor::ones({2, 3});
  EXPECT_TRUE(t.device().is_host());
  Tensor out = Tensor::empty({2, 3});
  dispatch(prim::Scale{t, 2.0f, out});
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(6, 2.0f));
}

TEST(CudaBackendNoGpuTest, TheCudaTableIsRegisteredExactlyWhereCudaIsBuilt) {
#if DPE_WITH_CUDA
  ASSERT_NE(find_op_table(DeviceType::kCuda), nullptr);
  // No fused batch norm + ReLU kernel: the optional pair is reported missing, so the module
  // fusion leaves the two ops apart on CUDA devices.
  EXPECT_FALSE(find_op_table(DeviceType::kCuda)->has(PrimId::BatchNormReluForwardTrain));
  EXPECT_FALSE(supports<prim::BatchNormReluBackward>(kCuda0));
  EXPECT_TRUE(supports<prim::BatchNormForwardTrain>(kCuda0));
  // bfloat16 and float16 kernels for the prims that have them (the host's list), float32 only for
  // the others.
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    EXPECT_TRUE(supports<prim::LinearForward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_TRUE(supports<prim::LinearBackward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_TRUE(supports<prim::Bmm>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_TRUE(supports<prim::Conv2dBackward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_TRUE(supports<prim::GeluBackward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_TRUE(supports<prim::ReluForward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_FALSE(supports<prim::SoftmaxForward>(kCuda0, dt)) << dtype_name(dt);
    EXPECT_FALSE(supports<prim::BatchNormForwardTrain>(kCuda0, dt)) << dtype_name(dt);
  }
  for (PrimId id : {PrimId::LinearForward, PrimId::Conv2dForward, PrimId::Add}) {
    EXPECT_TRUE(find_op_table(DeviceType::kCuda)->dtypes(id).has(DType::kBFloat16));
    EXPECT_EQ(find_op_table(DeviceType::kHost)->dtypes(id).has(DType::kFloat16),
              find_op_table(DeviceType::kCuda)->dtypes(id).has(DType::kFloat16));
  }
#else
  EXPECT_EQ(find_op_table(DeviceType::kCuda), nullptr);
  EXPECT_FALSE(supports<prim::BatchNormForwardTrain>(kCuda0));
#endif
}

}  // namespace
}  // namespace dpe
