// The demo's language-model imbalance on a tiny GPT with a large vocabulary: plain DataParallel
// puts the loss's memory on device 0, parallel_criterion removes most of it, and device 0's extra
// is fully accounted for by the memory categories; DDP's ranks train the same steps as
// DataParallel and hold the same memory.
#include "tools/demo_lib/lm_imbalance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "tests/tools/demo_lib/lm_imbalance_tiny.h"

namespace dpe::tools {
namespace {

double category(const ImbalanceReport& r, MemoryCategory c) {
  return r.extra_peak_by_category[static_cast<size_t>(c)];
}

TEST(LmImbalanceTest, DeviceZeroHoldsTheLossAndParallelCriterionRemovesIt) {
  set_host_device_count(2);
  const LmImbalanceOptions o = tiny_lm_options();
  const auto devices = Runtime::get().devices(DeviceType::kHost);
  const LmImbalanceRun plain = profile_lm_dp(o, devices, DpVariant::kPlain);
  const LmImbalanceRun spread = profile_lm_dp(o, devices, DpVariant::kParallelLoss);
  EXPECT_TRUE(std::isfinite(plain.last_loss));
  EXPECT_GT(plain.report.extra_peak_ratio, 1.5);
  EXPECT_GT(category(plain.report, MemoryCategory::kOutputGradients), 0);
  EXPECT_LT(spread.report.extra_peak_bytes, 0.5 * plain.report.extra_peak_bytes);
  double explained = 0;
  for (double b : plain.report.extra_peak_by_category) explained += b;
  EXPECT_NEAR(explained, plain.report.extra_peak_bytes, 1.0);
  EXPECT_LT(std::abs(category(plain.report, MemoryCategory::kOther)),
            0.1 * plain.report.extra_peak_bytes);  // the categories account for the difference
  const std::string table = lm_imbalance_table({plain, spread});
  EXPECT_NE(table.find("parallel_criterion removes"), std::string::npos) << table;
}

TEST(LmImbalanceTest, DdpRanksTrainTheSameStepsAndHoldTheSameMemory) {
  set_host_device_count(2);
  const LmImbalanceOptions o = tiny_lm_options();
  const LmImbalanceRun dp =
      profile_lm_dp(o, Runtime::get().devices(DeviceType::kHost), DpVariant::kPlain);
  const std::string worker = ::testing::internal::GetArgvs().at(1);
  const LmImbalanceRun ddp = profile_lm_ddp(o, 2, {worker});
  ASSERT_EQ(ddp.report.devices.size(), 2u);
  // The same model, batch and optimizer: after the warm-up step, the same loss.
  EXPECT_NEAR(ddp.last_loss, dp.last_loss, 1e-4 * std::abs(dp.last_loss));
  const double p0 = ddp.report.devices[0].peak_bytes, p1 = ddp.report.devices[1].peak_bytes;
  EXPECT_GT(p0, 0);
  EXPECT_LT(std::abs(p0 - p1), 0.05 * p0);
  // Every rank holds the optimizer's state (AdamW: two floats per parameter).
  EXPECT_GT(
      ddp.report.devices[1].peak_by_category[static_cast<size_t>(MemoryCategory::kOptimizerState)],
      0);
  const std::string table = lm_imbalance_table({dp, ddp});
  EXPECT_NE(table.find("DDP's ranks peak at"), std::string::npos) << table;
}

TEST(LmImbalanceTest, FailedDdpRanksAreAnError) {
  // A worker program that exits at once: no rank writes a result.
  try {
    profile_lm_ddp(tiny_lm_options(), 2, {"/bin/false"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 of 2 DDP ranks failed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpe::tools
