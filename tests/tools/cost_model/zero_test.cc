// zero_model_state_bytes against the ZeRO paper's worked example (figure 1: Ψ = 7.5 B, N = 64,
// K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB) and the fp32 accounting without a master copy.
#include "tools/cost_model/zero.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe::sim {
namespace {

TEST(ZeroTest, ThePapersWorkedExample) {
  const int64_t psi = 7'500'000'000;
  const double gb = 1e9;
  const double want[4] = {120.0, 31.4, 16.6, 1.9};  // the paper's figure 1, rounded to 0.1 GB
  for (int stage = 0; stage <= 3; ++stage) {
    const double got = zero_model_state_bytes(stage, psi, 64, Precision::kFp16, "adamw").total();
    EXPECT_NEAR(got / gb, want[stage], 0.05) << "stage " << stage;
  }
  // The parts of stage 2: fp16 parameters whole, gradients and Adam's 12 bytes sharded.
  const ModelStateBytes s2 = zero_model_state_bytes(2, psi, 64, Precision::kFp16, "adam");
  EXPECT_DOUBLE_EQ(s2.parameters, 2.0 * psi);
  EXPECT_DOUBLE_EQ(s2.gradients, 2.0 * psi / 64);
  EXPECT_DOUBLE_EQ(s2.optimizer_state, 12.0 * psi / 64);
}

TEST(ZeroTest, Fp32AdamHasNoMasterCopy) {
  const ModelStateBytes ddp = zero_model_state_bytes(0, 1000, 8, Precision::kFp32, "adamw");
  EXPECT_DOUBLE_EQ(ddp.parameters, 4000);
  EXPECT_DOUBLE_EQ(ddp.gradients, 4000);
  EXPECT_DOUBLE_EQ(ddp.optimizer_state, 8000);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(1, 1000, 8, Precision::kTf32, "adamw").total(),
                   4000 + 4000 + 1000);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(3, 1000, 8, Precision::kFp32, "adamw").total(), 2000);
  // SGD with momentum: one buffer (fp32), or master copy + buffer (mixed precision).
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(0, 1000, 8, Precision::kFp32, "sgd").optimizer_state,
                   4000);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(0, 1000, 8, Precision::kFp16, "sgd").optimizer_state,
                   8000);
}

TEST(ZeroTest, EveryStageNeedsLessAndOneGpuShardsNothing) {
  for (const Precision p : {Precision::kFp32, Precision::kFp16}) {
    double previous = 1e300;
    for (int stage = 0; stage <= 3; ++stage) {
      const double t = zero_model_state_bytes(stage, 124'000'000, 8, p, "adamw").total();
      EXPECT_LT(t, previous) << stage;
      previous = t;
      EXPECT_DOUBLE_EQ(zero_model_state_bytes(stage, 124'000'000, 1, p, "adamw").total(),
                       zero_model_state_bytes(0, 124'000'000, 1, p, "adamw").total());
    }
  }
}

TEST(ZeroTest, RejectsWhatItDoesNotModel) {
  EXPECT_THROW(zero_model_state_bytes(4, 1, 1, Precision::kFp32, "adamw"), dpe::Error);
  EXPECT_THROW(zero_model_state_bytes(1, 1, 0, Precision::kFp32, "adamw"), dpe::Error);
  EXPECT_THROW(zero_model_state_bytes(1, 1, 1, Precision::kFp32, "lamb"), dpe::Error);
}

}  // namespace
}  // namespace dpe::sim
