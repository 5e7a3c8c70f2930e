// CudaContext: lazily created streams and handles, workspace growth, read-back, stream ordering
// with events, peer access. Skips without a GPU.
#include "kernels/cuda/cuda_context.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/copy.cuh"
#include "kernels/cuda/device_runtime.h"

namespace dpe::cuda {
namespace {

void fill_floats(void* stream, float* p, int64_t n, float value) {
  fill(stream, p, &value, sizeof(float), n);
}

class CudaContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string status;
    if (device_count(&status) == 0) GTEST_SKIP() << "no CUDA device: " << status;
  }
};

TEST_F(CudaContextTest, CreatesItsResourcesOnceAndKeepsThem) {
  CudaContext ctx(0);
  EXPECT_EQ(ctx.device(), 0);
  void* s = ctx.stream();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ctx.stream(), s);
  EXPECT_NE(ctx.copy_stream(), nullptr);
  EXPECT_NE(ctx.copy_stream(), s);
  EXPECT_NE(ctx.cublas(), nullptr);
  EXPECT_NE(ctx.cudnn(), nullptr);
}

TEST_F(CudaContextTest, WorkspaceGrowsAndReadBackSeesTheStreamsWork) {
  CudaContext ctx(0);
  constexpr int64_t n = 1 << 20;  // 4 MiB: more than the first workspace
  ctx.workspace(16);
  auto* p = static_cast<float*>(ctx.workspace(n * sizeof(float)));
  fill_floats(ctx.stream(), p, n, 3.0f);
  std::vector<float> host(n);
  ctx.read_back(host.data(), p, n * sizeof(float));
  for (int64_t i = 0; i < n; i += 4097) ASSERT_EQ(host[i], 3.0f);
}

TEST_F(CudaContextTest, TheLegacyStreamWaitsForTheComputeStream) {
  // The design note of cuda_context.h: a synchronous cudaMemcpy (memcpy_between) after a kernel
  // on the blocking compute stream sees its result without an explicit synchronisation.
  CudaContext ctx(0);
  constexpr int64_t n = 1 << 22;
  auto* p = static_cast<float*>(malloc_on(0, n * sizeof(float)));
  fill_floats(ctx.stream(), p, n, 1.0f);
  fill_floats(ctx.stream(), p, n, 2.0f);
  std::vector<float> host(n);
  memcpy_between(host.data(), -1, p, 0, n * sizeof(float));
  EXPECT_EQ(host[n - 1], 2.0f);
  free_on(0, p);
}

TEST_F(CudaContextTest, EventsOrderTheCopyAndComputeStreams) {
  CudaContext ctx(0);
  constexpr int64_t n = 1 << 20;
  auto* p = static_cast<float*>(ctx.workspace(n * sizeof(float)));
  fill_floats(ctx.stream(), p, n, 5.0f);
  ctx.copy_waits_for_compute();
  fill_floats(ctx.copy_stream(), p, n, 6.0f);
  ctx.compute_waits_for_copy();
  std::vector<float> host(n);
  ctx.read_back(host.data(), p, n * sizeof(float));
  EXPECT_EQ(host[0], 6.0f);
  EXPECT_EQ(host[n - 1], 6.0f);
}

TEST_F(CudaContextTest, PeerAccessIsIdempotent) {
  for (int d = 0; d < device_count(nullptr); ++d) {
    EXPECT_NO_THROW(enable_peer_access_from(d));
    EXPECT_NO_THROW(enable_peer_access_from(d));
  }
}

}  // namespace
}  // namespace dpe::cuda
