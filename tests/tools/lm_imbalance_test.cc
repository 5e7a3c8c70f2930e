// The demo's language-model imbalance on a tiny GPT with a large vocabulary: plain DataParallel
// puts the loss's memory on device 0, parallel_criterion removes most of it, and device 0's extra
// is fully accounted for by the memory categories.
#include "tools/lm_imbalance.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/device/runtime.h"

namespace dpe::tools {
namespace {

double category(const ImbalanceReport& r, MemoryCategory c) {
  return r.extra_peak_by_category[static_cast<size_t>(c)];
}

TEST(LmImbalanceTest, DeviceZeroHoldsTheLossAndParallelCriterionRemovesIt) {
  Runtime::get().set_host_device_count(2);
  LmImbalanceOptions o;
  o.config = models::gpt_config("gpt-small");
  o.config.n_layer = 1;
  o.config.n_embd = 32;
  o.config.n_head = 2;
  o.config.vocab_size = 4000;  // logits dominate, as in a real language model
  o.batch = 4;
  o.context = 32;
  const auto devices = Runtime::get().host_devices();
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

}  // namespace
}  // namespace dpe::tools
