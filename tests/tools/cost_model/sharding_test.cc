// The sharding strategies (tools/cost_model/sharding.h): all-gather and reduce-scatter against
// all-reduce on a ring; gpt2's analytic profile against its traced one; memory per GPU along DDP >
// ZeRO-1 > SHARD_GRAD_OP > FULL_SHARD, activation checkpointing, FULL_SHARD slower than
// SHARD_GRAD_OP; the largest-GPT search monotone along the strategies.
#include "tools/cost_model/sharding.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "engine/core/error.h"
#include "tools/cost_model/cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/step_trace.h"
#include "tools/cost_model/zero.h"

namespace dpe::sim {
namespace {

double phase_ms(const Prediction& p, const std::string& name) {
  for (const auto& [n, ms] : p.phases) {
    if (n == name) return ms;
  }
  return 0;
}

double part_gib(const Prediction& p, const std::string& name) {
  for (const auto& [n, gib] : p.memory_gib) {
    if (n == name) return gib;
  }
  return -1;
}

// An all-reduce on a ring is a reduce-scatter then an all-gather: the two bandwidth terms add up to
// the all-reduce's, and the constant terms are one collective_base_us more (two launches).
TEST(ShardingTest, ReduceScatterPlusAllGatherIsAnAllReduceOnARing) {
  for (const char* preset : {"dgx-a100", "dgx1-v100", "pcie-a100"}) {
    const Cluster c = cluster_preset(preset, 8);
    const Collectives nccl(c, 8);  // the ring searched once
    const int64_t b = 256 << 20;
    const double bw_ar = nccl.all_reduce_us(2 * b) - nccl.all_reduce_us(b);
    const double bw_ag = nccl.all_gather_us(2 * b) - nccl.all_gather_us(b);
    const double bw_rs = nccl.reduce_scatter_us(2 * b) - nccl.reduce_scatter_us(b);
    EXPECT_NEAR(bw_ag + bw_rs, bw_ar, 1e-6 * bw_ar) << preset;
    EXPECT_NEAR(nccl.all_gather_us(b) + nccl.reduce_scatter_us(b),
                nccl.all_reduce_us(b) + c.links.collective_base_us, 1e-6 * bw_ar)
        << preset;
    // The free functions are the same costs.
    EXPECT_DOUBLE_EQ(all_gather_us(c, 8, b), nccl.all_gather_us(b)) << preset;
  }
  const Cluster c = cluster_preset("dgx-a100", 8);
  EXPECT_EQ(all_gather_us(c, 1, 1 << 20), 0);
  EXPECT_EQ(reduce_scatter_us(c, 8, 0), 0);
  // (N-1)/N of the bytes: 2 GPUs move half of what 8 do per byte of buffer, on NVSwitch.
  const int64_t big = int64_t{1} << 30;
  const Collectives two_gpus(c, 2), eight_gpus(c, 8);
  const double two = two_gpus.all_gather_us(big) - two_gpus.all_gather_us(big / 2);
  const double eight = eight_gpus.all_gather_us(big) - eight_gpus.all_gather_us(big / 2);
  EXPECT_NEAR(eight / two, (7.0 / 8) / (1.0 / 2), 1e-6);
}

TEST(ShardingTest, GptParametersAreDpesOwnCount) {
  models::GptConfig c = models::gpt_config("gpt2");
  // GPT-2 124M: 124,439,808 with the tied head and 1,024 positions.
  EXPECT_EQ(gpt_parameters(c), 124'439'808);
  c.vocab_size = 50304;
  EXPECT_EQ(gpt_parameters(c), 124'475'904);  // nanoGPT's padded vocabulary
}

struct Gpt2Fixture : ::testing::Test {
  static TracedStep trace(int64_t batch) {
    StepSpec spec;
    spec.model = "gpt2";
    spec.batch_per_device = batch;
    spec.seq = kSeq;
    return trace_ddp_step(spec);
  }
  static void SetUpTestSuite() {
    trace_ = new TracedStep(trace(kBatch));
    one_ = new TracedStep(trace(1));
  }
  static void TearDownTestSuite() {
    delete trace_;
    delete one_;
    trace_ = one_ = nullptr;
  }
  static constexpr int64_t kBatch = 2, kSeq = 256;
  static TracedStep* trace_;  // kBatch sequences
  static TracedStep* one_;    // one sequence
};
TracedStep* Gpt2Fixture::one_ = nullptr;
TracedStep* Gpt2Fixture::trace_ = nullptr;

// The analytic profile against the traced one for gpt2 (124 M), 2 x 256 tokens, fp32 on an A100:
// the parameters exactly; forward, backward and the optimizer's step within 20% (measured: traced
// 1.06, 1.11 and 1.19 x the formula's). Activations per sequence (the traced peaks of 2 sequences
// less 1, so that what does not grow with the batch cancels: the tied embedding's dense gradient
// temporaries, 154 MB each) within 25% of the formula's (measured 1.24: dpe's unfused ops keep more
// than Megatron's, and its peak comes early in backward, beside the first gradients).
TEST_F(Gpt2Fixture, AnalyticProfileMatchesTheTracedOne) {
  const models::GptConfig config = models::gpt_config("gpt2");
  const Cluster c = cluster_preset("dgx-a100", 8);
  ReplayOptions o;
  const StepProfile traced = traced_profile(*trace_, config, kBatch, kSeq, c.gpu, o);
  const StepProfile traced_one = traced_profile(*one_, config, 1, kSeq, c.gpu, o);
  const StepProfile analytic = gpt_profile(config, kBatch, kSeq, c.gpu, o, "adamw");
  const StepProfile analytic_one = gpt_profile(config, 1, kSeq, c.gpu, o, "adamw");
  const double per_sequence = (traced.activation_bytes - traced_one.activation_bytes) /
                              (analytic.activation_bytes - analytic_one.activation_bytes);
  std::printf(
      "traced / analytic: forward %.3f, backward %.3f, step %.3f, activations per sequence "
      "%.3f (%.1f MB traced)\n",
      traced.forward_us / analytic.forward_us, traced.backward_us / analytic.backward_us,
      traced.optimizer_us / analytic.optimizer_us, per_sequence,
      (traced.activation_bytes - traced_one.activation_bytes) / 1e6);
  EXPECT_EQ(traced.params, analytic.params);
  EXPECT_NEAR(traced.forward_us / analytic.forward_us, 1.0, 0.2);
  EXPECT_NEAR(traced.backward_us / analytic.backward_us, 1.0, 0.2);
  EXPECT_NEAR(traced.optimizer_us / analytic.optimizer_us, 1.0, 0.2);
  EXPECT_NEAR(per_sequence, 1.0, 0.25);
  // Checkpointing keeps the same share of both: the blocks' inputs, one block, the outside part.
  EXPECT_NEAR(traced.checkpointed_activation_bytes / traced.activation_bytes,
              analytic.checkpointed_activation_bytes / analytic.activation_bytes, 1e-9);
  EXPECT_LT(analytic.checkpointed_activation_bytes, 0.5 * analytic.activation_bytes);
  EXPECT_GT(traced.recompute_us, 0.5 * traced.forward_us);
  EXPECT_LT(traced.recompute_us, traced.forward_us);
  // The units: the root (embeddings, final LayerNorm) and 12 blocks of 7.1 M.
  ASSERT_EQ(traced.unit_params.size(), 13u);
  EXPECT_EQ(traced.unit_params[1], 7'087'872);
  EXPECT_EQ(traced.unit_params[0], 124'439'808 - 12 * 7'087'872);
}

// Memory per GPU for gpt2 on 8 A100s: DDP > ZeRO-1 > SHARD_GRAD_OP > FULL_SHARD, each part where
// the stage puts it; checkpointing lowers the activations and costs a recomputation; FULL_SHARD's
// step is longer than SHARD_GRAD_OP's (its backward all-gathers); ZeRO-1 adds the all-gather of
// the updated parameters and does 1/N of the step.
TEST_F(Gpt2Fixture, MemoryFallsAlongTheStagesAndTimeRises) {
  const models::GptConfig config = models::gpt_config("gpt2");
  const Cluster c = cluster_preset("dgx-a100", 8);
  for (const Precision precision : {Precision::kFp32, Precision::kFp16}) {
    ReplayOptions o;
    o.precision = precision;
    const StepProfile profile = traced_profile(*trace_, config, kBatch, kSeq, c.gpu, o);
    const Collectives nccl(c, 8);
    std::map<std::string, Prediction> p;
    for (const bool ac : {false, true}) {
      for (const Strategy s : all_strategies()) {
        StrategyOptions so;
        so.strategy = s;
        so.activation_checkpointing = ac;
        p[strategy_mode(so)] = predict_strategy(profile, so, 8, c, o, nccl);
      }
    }
    for (const char* suffix : {"", "+ac"}) {
      const std::string x = suffix;
      SCOPED_TRACE(x);
      EXPECT_GT(p["ddp" + x].peak_gib[0], p["zero1" + x].peak_gib[0]);
      EXPECT_GT(p["zero1" + x].peak_gib[0], p["grad-op" + x].peak_gib[0]);
      EXPECT_GT(p["grad-op" + x].peak_gib[0], p["full-shard" + x].peak_gib[0]);
      EXPECT_GT(p["full-shard" + x].step_ms, p["grad-op" + x].step_ms);
      EXPECT_GT(phase_ms(p["full-shard" + x], "all_gather_backward"), 0);
      EXPECT_EQ(phase_ms(p["grad-op" + x], "all_gather_backward"), 0);
      EXPECT_GT(phase_ms(p["grad-op" + x], "all_gather_forward"), 0);
      EXPECT_GT(phase_ms(p["zero1" + x], "param_all_gather"), 0);
      EXPECT_NEAR(phase_ms(p["zero1" + x], "step"), phase_ms(p["ddp" + x], "step") / 8, 1e-9);
      EXPECT_EQ(p["ddp" + x].peak_gib.size(), 8u);
      double sum = 0;
      for (const auto& ph : p["full-shard" + x].phases) sum += ph.second;
      EXPECT_NEAR(sum, p["full-shard" + x].step_ms, 1e-9);
    }
    for (const Strategy s : all_strategies()) {
      StrategyOptions so;
      so.strategy = s;
      const std::string m = strategy_mode(so);
      SCOPED_TRACE(m);
      EXPECT_LT(part_gib(p[m + "+ac"], "activations"), part_gib(p[m], "activations"));
      EXPECT_GT(p[m + "+ac"].step_ms, p[m].step_ms);
      EXPECT_NEAR(p[m + "+ac"].peak_gib[0] - p[m].peak_gib[0],
                  part_gib(p[m + "+ac"], "activations") - part_gib(p[m], "activations"), 1e-9);
      // The model states are the formula's.
      const ModelStateBytes states =
          zero_model_state_bytes(zero_stage(s), profile.params, 8, precision, "adamw");
      EXPECT_NEAR(part_gib(p[m], "optimizer_state") * (1 << 30), states.optimizer_state, 1);
      EXPECT_NEAR(part_gib(p[m], "parameters") * (1 << 30), states.parameters, 1);
    }
  }
}

TEST(ShardingTest, CheckpointingNeedsTransformerBlocks) {
  StepProfile profile;
  profile.params = 1000;
  profile.unit_params = {1000};
  StrategyOptions so;
  so.activation_checkpointing = true;
  EXPECT_THROW(predict_strategy(profile, so, 2, cluster_preset("dgx-a100", 8), ReplayOptions()),
               dpe::Error);
  EXPECT_THROW(strategy_from_flag("zero2"), dpe::Error);
  EXPECT_EQ(strategy_from_flag("grad-op"), Strategy::kShardGradOp);
}

// The largest GPT on 8 x 40 GiB A100s (fp16, 4 x 1,024 tokens per GPU): a row per strategy,
// FULL_SHARD fitting at least what SHARD_GRAD_OP fits, and so on down to DDP; checkpointing never
// fits less.
TEST(ShardingTest, LargestGptIsMonotoneAlongTheStrategies) {
  const Cluster c = cluster_preset("dgx-a100-40g", 8);
  EXPECT_EQ(c.gpu.mem_gib, 40);
  ReplayOptions o;
  o.precision = Precision::kFp16;
  std::vector<StrategyOptions> strategies;
  for (const bool ac : {false, true}) {
    for (const Strategy s : all_strategies()) strategies.push_back({s, ac, "adamw", 25});
  }
  const std::vector<LargestGpt> rows = largest_gpt(strategies, 4, 1024, 50257, 8, c, o);
  const Collectives nccl(c, 8);
  ASSERT_EQ(rows.size(), 8u);
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(strategy_mode(rows[i].strategy));
    EXPECT_GE(rows[i].rung, 0);
    EXPECT_FALSE(rows[i].prediction.out_of_memory);
    EXPECT_GT(rows[i].prediction.step_ms, 0);
    if (i % 4 > 0) {
      EXPECT_GE(rows[i].rung, rows[i - 1].rung);
    }
    if (i >= 4) {
      EXPECT_GE(rows[i].rung, rows[i - 4].rung);
    }
    // The next rung does not fit.
    if (rows[i].rung + 1 < static_cast<int>(gpt_ladder().size())) {
      const models::GptConfig next = gpt_rung_config(gpt_ladder()[rows[i].rung + 1], 50257, 1024);
      EXPECT_TRUE(predict_strategy(gpt_profile(next, 4, 1024, c.gpu, o, "adamw"), rows[i].strategy,
                                   8, c, o, nccl)
                      .out_of_memory);
    }
  }
  EXPECT_GT(rows[3].rung, rows[0].rung);  // FULL_SHARD fits a larger GPT than DDP
}

}  // namespace
}  // namespace dpe::sim
