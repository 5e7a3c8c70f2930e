// The roofline prices each op at max(FLOPs / peak, bytes / bandwidth) and reports the busiest
// device, op by op.
#include "tools/bench_lib/roofline.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe::tools {
namespace {

TraceEvent op(const char* name, const char* op_class, const char* device, double flops,
              int64_t read, int64_t written, int64_t ns, bool backward = false) {
  TraceEvent e;
  e.kind = TraceKind::kOp;
  e.name = name;
  e.op_class = op_class;
  e.device = Device::parse(device);
  e.flops = flops;
  e.bytes_read = read;
  e.bytes_written = written;
  e.duration_ns = ns;
  e.backward = backward;
  return e;
}

constexpr MachineRates kRates{/*peak_gflops=*/100, /*memory_gbs=*/10, /*measured_at=*/1 << 20};

TEST(RooflineTest, EachOpAtTheSlowerOfItsComputeAndItsBytes) {
  std::vector<TraceEvent> events{
      op("linear", "gemm", "host:0", 2e9, 4e6, 4e6, 25'000'000),  // 20 ms of FLOPs, 0.8 of bytes
      op("gelu", "elementwise", "host:0", 1e6, 5e7, 5e7, 12'000'000),         // 10 ms of bytes
      op("linear", "gemm", "host:0", 1e9, 1e3, 1e3, 15'000'000),              // another call: 10 ms
      op("linear_backward", "gemm", "host:0", 4e9, 0, 0, 50'000'000, true)};  // 40 ms
  TraceEvent fill;
  fill.kind = TraceKind::kFill;
  fill.name = fill.op_class = "fill";
  fill.device = Device::parse("host:0");
  fill.bytes_written = 10'000'000;  // 1 ms, untimed
  events.push_back(fill);
  TraceEvent node;  // backward's nodes are not priced
  node.kind = TraceKind::kNode;
  node.name = "LinearBackward";
  node.device = Device::parse("host:0");
  node.bytes_read = int64_t{1} << 40;
  events.push_back(node);

  const Roofline r = roofline(events, kRates);
  EXPECT_EQ(r.device, "host:0");
  EXPECT_NEAR(r.bound_ms, 20 + 10 + 10 + 40 + 1, 1e-9);
  EXPECT_NEAR(r.compute_bound_ms, 70, 1e-9);
  EXPECT_NEAR(r.memory_bound_ms, 11, 1e-9);
  EXPECT_NEAR(r.kernel_ms, 25 + 12 + 15 + 50, 1e-9);
  ASSERT_EQ(r.ops.size(), 4u);                  // linear, gelu, linear_backward, fill
  EXPECT_EQ(r.ops[0].name, "linear_backward");  // the largest measured time first
  EXPECT_TRUE(r.ops[0].backward);
  EXPECT_EQ(r.ops[1].name, "linear");
  EXPECT_EQ(r.ops[1].calls, 2);
  EXPECT_NEAR(r.ops[1].measured_ms, 40, 1e-9);
  EXPECT_NEAR(r.ops[1].bound_ms, 30, 1e-9);
  EXPECT_EQ(r.ops[3].name, "fill");
  EXPECT_FALSE(r.ops[3].timed);
  EXPECT_NEAR(r.ops[3].bound_ms, 1, 1e-9);
}

TEST(RooflineTest, AConvolutionsProductsWithPaddingAreNotPriced) {
  TraceEvent conv = op("conv2d", "conv", "host:0", 3e9, 0, 0, 25'000'000);
  conv.padding_flops = 1e9;  // oneDNN skips them: 20 ms, not 30
  const Roofline r = roofline({conv}, kRates);
  EXPECT_NEAR(r.bound_ms, 20, 1e-9);
  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].flops, 3e9);  // its GFLOP/s still count every tap
}

TEST(RooflineTest, TheBusiestDeviceSetsTheBound) {
  const std::vector<TraceEvent> events{op("linear", "gemm", "host:0", 1e9, 0, 0, 1),
                                       op("linear", "gemm", "host:1", 3e9, 0, 0, 1),
                                       op("add", "elementwise", "host:0", 0, 1e7, 1e7, 1)};
  const Roofline r = roofline(events, kRates);
  EXPECT_EQ(r.device, "host:1");
  EXPECT_NEAR(r.bound_ms, 30, 1e-9);
  ASSERT_EQ(r.ops.size(), 1u);
}

TEST(RooflineTest, NoRatesOrNoOpsAreErrors) {
  const std::vector<TraceEvent> events{op("linear", "gemm", "host:0", 1e9, 0, 0, 1)};
  EXPECT_THROW(roofline(events, MachineRates{0, 10, 1}), Error);
  EXPECT_THROW(roofline(events, MachineRates{100, 0, 1}), Error);
  EXPECT_THROW(roofline({}, kRates), Error);
}

TEST(RooflineTest, MemoryIsMeasuredAtTheSizeTheOpsMove) {
  // Byte-weighted median of the memory-bound ops; the GEMMs do not count; 64 KiB at least.
  const std::vector<TraceEvent> events{op("linear", "gemm", "host:0", 1e9, 1e9, 0, 1),
                                       op("add", "elementwise", "host:0", 0, 1 << 20, 1 << 20, 1),
                                       op("relu", "elementwise", "host:0", 0, 1 << 22, 0, 1)};
  EXPECT_EQ(memory_measure_bytes(events), int64_t{1} << 22);
  EXPECT_EQ(memory_measure_bytes({op("add", "elementwise", "host:0", 0, 8, 8, 1)}), 64 << 10);
  EXPECT_EQ(memory_measure_bytes({}), 64 << 10);
  EXPECT_GT(measure_memory_gbs(1 << 20, 3), 0);
}

}  // namespace
}  // namespace dpe::tools
