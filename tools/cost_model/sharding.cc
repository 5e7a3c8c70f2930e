#include "tools/cost_model/sharding.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "tools/cost_model/zero.h"

namespace dpe::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double value_bytes(Precision p) { return is_mixed(p) ? 2 : 4; }

// One phase's kernels issued back to back (as replay.cc's streams): the CPU dispatches each, the
// GPU runs it once issued and the previous one is done.
struct PhaseStream {
  double cpu = 0, gpu = 0;
  void run(double gpu_us, double dispatch_us) {
    cpu += dispatch_us;
    gpu = std::max(gpu, cpu) + gpu_us;
  }
};

// A collective that becomes ready during backward, at `ready` us after backward's start.
struct Piece {
  double ready = 0, cost = 0;
};

}  // namespace

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> all = {Strategy::kDdp, Strategy::kZero1,
                                            Strategy::kShardGradOp, Strategy::kFullShard};
  return all;
}

std::string strategy_flag(Strategy s) {
  switch (s) {
    case Strategy::kDdp:
      return "ddp";
    case Strategy::kZero1:
      return "zero1";
    case Strategy::kShardGradOp:
      return "grad-op";
    case Strategy::kFullShard:
      return "full-shard";
  }
  return "?";
}

std::string strategy_label(Strategy s) {
  switch (s) {
    case Strategy::kDdp:
      return "DDP";
    case Strategy::kZero1:
      return "DDP+ZeRO-1";
    case Strategy::kShardGradOp:
      return "FSDP SHARD_GRAD_OP";
    case Strategy::kFullShard:
      return "FSDP FULL_SHARD";
  }
  return "?";
}

int zero_stage(Strategy s) { return static_cast<int>(s); }

Strategy strategy_from_flag(const std::string& flag) {
  for (Strategy s : all_strategies()) {
    if (strategy_flag(s) == flag) return s;
  }
  DPE_THROW("unknown strategy '" << flag << "' (ddp, zero1, grad-op, full-shard)");
}

std::string strategy_mode(const StrategyOptions& s) {
  return strategy_flag(s.strategy) + (s.activation_checkpointing ? "+ac" : "");
}

// --- the GPT's analytic profile ---

int64_t gpt_block_parameters(const models::GptConfig& c) {
  return 12 * c.n_embd * c.n_embd + 13 * c.n_embd;
}

int64_t gpt_parameters(const models::GptConfig& c) {
  return c.n_layer * gpt_block_parameters(c) + (c.vocab_size + c.block_size + 2) * c.n_embd;
}

double gpt_forward_flops(const models::GptConfig& c, int64_t batch, int64_t seq) {
  const double b = batch, s = seq, d = c.n_embd, L = c.n_layer, V = c.vocab_size;
  return 2 * b * s * (12 * L * d * d + V * d) + 4 * b * s * s * d * L;
}

namespace {

// One block's activations, in bytes (Korthikanti et al. 2022, table 2).
double layer_activation_bytes(const models::GptConfig& c, int64_t batch, int64_t seq, Precision p) {
  const double sbh = static_cast<double>(seq) * batch * c.n_embd;
  const double as2b = static_cast<double>(c.n_head) * seq * seq * batch;
  const double e = value_bytes(p);
  if (c.dropout > 0) return e * (16 * sbh + 2 * as2b) + 2 * sbh + as2b;  // + one-byte masks
  return e * (16 * sbh + as2b);
}

// Outside the blocks: embedding dropout mask, final LayerNorm and head inputs, logits, the loss's
// fp32 log-softmax.
double outside_activation_bytes(const models::GptConfig& c, int64_t batch, int64_t seq,
                                Precision p) {
  const double sbh = static_cast<double>(seq) * batch * c.n_embd;
  const double sbv = static_cast<double>(seq) * batch * c.vocab_size;
  const double e = value_bytes(p);
  return (c.dropout > 0 ? sbh : 0) + 2 * e * sbh + e * sbv + 4 * sbv;
}

}  // namespace

double gpt_activation_bytes(const models::GptConfig& c, int64_t batch, int64_t seq, Precision p,
                            bool checkpointing) {
  const double layer = layer_activation_bytes(c, batch, seq, p);
  const double outside = outside_activation_bytes(c, batch, seq, p);
  if (!checkpointing) return c.n_layer * layer + outside;
  const double input = value_bytes(p) * static_cast<double>(seq) * batch * c.n_embd;
  return c.n_layer * input + layer + outside;
}

namespace {

double gemm_us(double flops, const GpuSpec& gpu, const ReplayOptions& o) {
  return flops / (gpu.peak_tflops(o.precision) * o.efficiency.gemm * 1e6);
}
double memory_us(double bytes, const GpuSpec& gpu, const ReplayOptions& o) {
  return bytes / (gpu.mem_bw_gbs * o.efficiency.memory * 1e3);
}

// The blocks' share of the forward's time (what checkpointing recomputes).
double block_forward_share(const models::GptConfig& c, int64_t batch, int64_t seq,
                           const GpuSpec& gpu, const ReplayOptions& o) {
  const double b = batch, s = seq, d = c.n_embd, L = c.n_layer;
  const double blocks =
      gemm_us(2 * b * s * 12 * L * d * d + 4 * b * s * s * d * L, gpu, o) +
      memory_us(2 * L * layer_activation_bytes(c, batch, seq, o.precision), gpu, o);
  const double all = gemm_us(gpt_forward_flops(c, batch, seq), gpu, o) +
                     memory_us(2 * gpt_activation_bytes(c, batch, seq, o.precision, false), gpu, o);
  return all > 0 ? blocks / all : 0;
}

std::vector<int64_t> gpt_units(const models::GptConfig& c, int64_t params) {
  std::vector<int64_t> units(1 + c.n_layer, gpt_block_parameters(c));
  units[0] = std::max<int64_t>(0, params - c.n_layer * gpt_block_parameters(c));
  return units;
}

double optimizer_bytes_per_parameter(const std::string& optimizer) {
  return optimizer == "sgd" ? 20 : 28;
}

}  // namespace

StepProfile gpt_profile(const models::GptConfig& c, int64_t batch, int64_t seq, const GpuSpec& gpu,
                        const ReplayOptions& o, const std::string& optimizer) {
  StepProfile p;
  p.params = gpt_parameters(c);
  p.unit_params = gpt_units(c, p.params);
  p.activation_bytes = gpt_activation_bytes(c, batch, seq, o.precision, false);
  p.checkpointed_activation_bytes = gpt_activation_bytes(c, batch, seq, o.precision, true);
  p.checkpointable = true;
  p.forward_us =
      gemm_us(gpt_forward_flops(c, batch, seq), gpu, o) + memory_us(2 * p.activation_bytes, gpu, o);
  p.backward_us = 2 * p.forward_us;
  p.optimizer_us = memory_us(optimizer_bytes_per_parameter(optimizer) * p.params, gpu, o);
  p.recompute_us = p.forward_us * block_forward_share(c, batch, seq, gpu, o);
  return p;
}

StepProfile traced_profile(const TracedStep& trace, const std::optional<models::GptConfig>& gpt,
                           int64_t batch, int64_t seq, const GpuSpec& gpu, const ReplayOptions& o) {
  DPE_CHECK(!trace.peak_bytes.empty() && !trace.peak_by_category.empty(),
            "traced_profile: a trace without memory peaks");
  StepProfile p;
  PhaseStream forward, backward, step;
  bool in_backward = false;
  const double dispatch = o.framework.op_dispatch_us;
  for (const TraceEvent& e : trace.events) {
    const bool step_op = e.op_class == "optimizer" || e.category == MemoryCategory::kOptimizerState;
    in_backward = in_backward || e.backward || step_op;
    if (!is_kernel(e)) continue;
    const double d = op_time_us(e, gpu, o);
    if (step_op) {
      step.run(d, dispatch);
    } else if (in_backward) {
      backward.run(d, dispatch);
    } else {
      forward.run(d, dispatch);
    }
  }
  p.forward_us = forward.gpu;
  p.backward_us = backward.gpu;
  p.optimizer_us = step.gpu;
  p.params = trace.param_bytes / 4;
  const auto& at_peak = trace.peak_by_category[0];
  const auto held = [&](MemoryCategory m) {
    return static_cast<double>(at_peak[static_cast<size_t>(m)]);
  };
  const double states = held(MemoryCategory::kParameters) + held(MemoryCategory::kGradients) +
                        held(MemoryCategory::kOptimizerState) +
                        held(MemoryCategory::kCommunication);
  p.activation_bytes = std::max(0.0, static_cast<double>(trace.peak_bytes[0]) - states);
  if (is_mixed(o.precision)) p.activation_bytes /= 2;  // the trace's values are fp32
  p.checkpointed_activation_bytes = p.activation_bytes;
  if (gpt) {
    p.checkpointable = true;
    p.unit_params = gpt_units(*gpt, p.params);
    const double full = gpt_activation_bytes(*gpt, batch, seq, o.precision, false);
    const double kept = gpt_activation_bytes(*gpt, batch, seq, o.precision, true);
    p.checkpointed_activation_bytes = p.activation_bytes * kept / full;
    p.recompute_us = p.forward_us * block_forward_share(*gpt, batch, seq, gpu, o);
  } else {
    p.unit_params = {p.params};
  }
  return p;
}

// --- the strategies ---

Prediction predict_strategy(const StepProfile& pr, const StrategyOptions& so, int gpus,
                            const Cluster& c, const ReplayOptions& o) {
  DPE_CHECK(gpus >= 1 && gpus <= c.total_gpus(),
            "predict_strategy: " << gpus << " GPUs on a cluster of " << c.total_gpus());
  return predict_strategy(pr, so, gpus, c, o, Collectives(c, gpus));
}

namespace {

// What predict_strategy's steps share: the strategy's ZeRO stage and what its collectives move.
struct StrategyShape {
  int stage = 0;
  bool fsdp = false;  // stage 2 or 3
  int gpus = 1;
  // What the collectives move per parameter: the parameters' and gradients' own dtype (fp16 in
  // mixed precision, ZeRO's accounting).
  double pb = 0, gb = 0;
  double psi = 0;     // Ψ
  size_t blocks = 0;  // the units after the root
};

StrategyShape strategy_shape(const StepProfile& pr, const StrategyOptions& so, int gpus,
                             const ReplayOptions& o) {
  StrategyShape s;
  s.stage = zero_stage(so.strategy);
  s.fsdp = s.stage >= 2;
  s.gpus = gpus;
  const ModelStateBytes per = model_state_bytes_per_parameter(o.precision, so.optimizer);
  s.pb = per.parameters;
  s.gb = per.gradients;
  s.psi = static_cast<double>(pr.params);
  s.blocks = pr.unit_params.size() - 1;
  return s;
}

struct AllGathers {
  double forward = 0, backward = 0;
  int count = 0;
};

// FSDP's all-gathers, before each unit's forward, and with FULL_SHARD before each block's
// backward (the root unit stays gathered from forward to backward, as PyTorch's root does): no
// prefetch, so each one waits for the compute before it and the compute after waits for it.
AllGathers fsdp_all_gathers(const StepProfile& pr, const StrategyShape& s,
                            const Collectives& nccl) {
  AllGathers ag;
  if (!s.fsdp || s.gpus <= 1) return ag;
  for (size_t u = 0; u < pr.unit_params.size(); ++u) {
    const int64_t bytes = static_cast<int64_t>(pr.unit_params[u] * s.pb);
    ag.forward += nccl.all_gather_us(bytes);
    ++ag.count;
    if (s.stage == 3 && u > 0) {
      ag.backward += nccl.all_gather_us(bytes);
      ++ag.count;
    }
  }
  return ag;
}

// Gradient collectives, in backward's order: the blocks from the last one, each ready when its
// backward ends (backward's time, `span`, evenly shared by the blocks), then the root unit (its
// embedding's gradient completes at the very end). DDP splits each unit into buckets of at most
// bucket_cap_mb (the root's tied embedding is one tensor: one bucket; a model without blocks
// spreads its buckets evenly over backward); FSDP reduce-scatters each unit once.
std::vector<Piece> gradient_collectives(const StepProfile& pr, const StrategyShape& s, double span,
                                        double bucket_cap_mb, const Collectives& nccl) {
  std::vector<Piece> pieces;
  if (s.gpus <= 1) return pieces;
  const double cap = bucket_cap_mb * 1024 * 1024;
  auto add_unit = [&](double start, double end, int64_t params, bool one_bucket) {
    const double bytes = static_cast<double>(params) * s.gb;
    if (s.fsdp) {
      pieces.push_back({end, nccl.reduce_scatter_us(static_cast<int64_t>(bytes))});
      return;
    }
    const int k = one_bucket ? 1 : std::max(1, static_cast<int>(std::ceil(bytes / cap)));
    for (int i = 1; i <= k; ++i) {
      pieces.push_back(
          {start + (end - start) * i / k, nccl.all_reduce_us(static_cast<int64_t>(bytes / k))});
    }
  };
  const size_t blocks = s.blocks;
  for (size_t b = 0; b < blocks; ++b) {
    add_unit(span * b / (blocks + 1.0), span * (b + 1) / (blocks + 1.0),
             pr.unit_params[blocks - b], false);
  }
  add_unit(blocks > 0 ? span * blocks / (blocks + 1.0) : 0, span, pr.unit_params[0], blocks > 0);
  return pieces;
}

struct StreamTime {
  double exposed = 0;  // past the end of backward
  double total = 0;    // the collectives' own time
};

// The collectives one after another on NCCL's stream, each from when it is ready.
StreamTime on_nccl_stream(const std::vector<Piece>& pieces, double span) {
  double end = 0;
  StreamTime t;
  for (const Piece& piece : pieces) {
    end = std::max(end, piece.ready) + piece.cost;
    t.total += piece.cost;
  }
  t.exposed = std::max(0.0, end - span);
  return t;
}

void set_limiting_phase(Prediction& p) {
  double most = -1;
  for (const auto& [name, ms] : p.phases) {
    if (ms > most) {
      most = ms;
      p.limiting = name;
    }
  }
}

int64_t comm_bytes_per_gpu(const StepProfile& pr, const StrategyShape& s) {
  const double n = s.gpus;
  const double ring = (n - 1) / n;
  const double psi = s.psi, pb = s.pb, gb = s.gb;
  return static_cast<int64_t>(
      s.stage == 0 ? 2 * ring * psi * gb
      : s.stage == 1
          ? 2 * ring * psi * gb + ring * psi * pb
          : ring * psi * (gb + pb) + (s.stage == 3 ? ring * (psi - pr.unit_params[0]) * pb : 0));
}

// Memory: ZeRO's model states, the activations, and each strategy's buffers.
void set_memory(Prediction& p, const StepProfile& pr, const StrategyShape& s,
                const StrategyOptions& so, const Cluster& c, const ReplayOptions& o) {
  const int gpus = s.gpus;
  const ModelStateBytes states =
      zero_model_state_bytes(s.stage, pr.params, gpus, o.precision, so.optimizer);
  const double activations =
      so.activation_checkpointing ? pr.checkpointed_activation_bytes : pr.activation_bytes;
  const int64_t largest_block =
      s.blocks > 0 ? *std::max_element(pr.unit_params.begin() + 1, pr.unit_params.end()) : 0;
  const int64_t largest_unit = std::max(pr.unit_params[0], largest_block);
  // DDP's buckets: a second copy of the gradients (gradient_as_bucket_view=False, PyTorch's
  // default). FSDP: a unit's unsharded gradient before its reduce-scatter; FULL_SHARD also holds
  // the root unit and one block gathered (no prefetch).
  const double buckets = !s.fsdp && gpus > 1 ? s.psi * s.gb : 0;
  const double unsharded_grad = s.fsdp && gpus > 1 ? largest_unit * s.gb : 0;
  const double gathered =
      s.stage == 3 && gpus > 1 ? static_cast<double>(pr.unit_params[0] + largest_block) * s.pb : 0;
  p.memory_gib = {{"parameters", states.parameters / kGiB},
                  {"gradients", states.gradients / kGiB},
                  {"optimizer_state", states.optimizer_state / kGiB},
                  {"activations", activations / kGiB},
                  {"buckets", buckets / kGiB},
                  {"unsharded_gradient", unsharded_grad / kGiB},
                  {"gathered_parameters", gathered / kGiB},
                  {"context", o.context_gib}};
  double peak = 0;
  for (const auto& part : p.memory_gib) peak += part.second;
  p.peak_gib.assign(gpus, peak);
  p.out_of_memory = peak > c.gpu.mem_gib;
}

}  // namespace

Prediction predict_strategy(const StepProfile& pr, const StrategyOptions& so, int gpus,
                            const Cluster& c, const ReplayOptions& o, const Collectives& nccl) {
  DPE_CHECK(gpus >= 1 && gpus <= c.total_gpus(),
            "predict_strategy: " << gpus << " GPUs on a cluster of " << c.total_gpus());
  const bool ac = so.activation_checkpointing;
  DPE_CHECK(!ac || pr.checkpointable,
            "activation checkpointing is per transformer block: GPT models only");
  DPE_CHECK(!pr.unit_params.empty(), "predict_strategy: a profile without units");
  const StrategyShape s = strategy_shape(pr, so, gpus, o);

  Prediction p;
  p.mode = strategy_mode(so);
  p.gpus = gpus;
  const double backward = pr.backward_us + (ac ? pr.recompute_us : 0);
  const AllGathers ag = fsdp_all_gathers(pr, s, nccl);
  const double span = backward + ag.backward;
  const std::vector<Piece> pieces = gradient_collectives(pr, s, span, so.bucket_cap_mb, nccl);
  const StreamTime comm = on_nccl_stream(pieces, span);
  // The compute beside a collective runs slower (ReplayOptions::overlap_slowdown).
  const double slowed = o.overlap_slowdown * std::min(pr.backward_us, comm.total - comm.exposed);
  const double zero1_gather =
      s.stage == 1 ? nccl.all_gather_us(static_cast<int64_t>(s.psi * s.pb)) : 0;

  const double framework = gpus > 1 ? o.framework.ddp_fixed_us : 0;
  const double step = pr.optimizer_us / (s.stage >= 1 ? static_cast<double>(gpus) : 1);
  auto phase = [&](const char* name, double us, bool always) {
    if (us > 0 || always) p.phases.emplace_back(name, us / 1e3);
  };
  phase("framework", framework, true);
  phase("all_gather_forward", ag.forward, false);
  phase("forward", pr.forward_us, true);
  phase("all_gather_backward", ag.backward, false);
  phase("backward", pr.backward_us + slowed, true);
  phase("recompute", ac ? pr.recompute_us : 0, false);
  phase(s.fsdp ? "reduce_scatter_exposed" : "all_reduce_exposed", comm.exposed, true);
  phase("step", step, true);
  phase("param_all_gather", zero1_gather, false);
  for (const auto& ph : p.phases) p.step_ms += ph.second;
  set_limiting_phase(p);
  p.buckets = ag.count + static_cast<int>(pieces.size()) + (s.stage == 1 && gpus > 1 ? 1 : 0);
  p.comm_bytes_per_gpu = comm_bytes_per_gpu(pr, s);
  set_memory(p, pr, s, so, c, o);
  return p;
}

// --- the largest GPT ---

const std::vector<GptRung>& gpt_ladder() {
  static const std::vector<GptRung> ladder = {
      {"GPT-2 124M", 12, 768, 12},  {"GPT-2 350M", 24, 1024, 16},  {"GPT-2 774M", 36, 1280, 20},
      {"GPT-2 1.5B", 48, 1600, 25}, {"GPT-3 2.7B", 32, 2560, 32},  {"GPT-3 6.7B", 32, 4096, 32},
      {"GPT-3 13B", 40, 5120, 40},  {"NeoX 20B", 44, 6144, 64},    {"MPT 30B", 48, 7168, 64},
      {"65B", 80, 8192, 64},        {"GPT-3 175B", 96, 12288, 96},
  };
  return ladder;
}

models::GptConfig gpt_rung_config(const GptRung& rung, int64_t vocab, int64_t context) {
  models::GptConfig c;
  c.name = rung.name;
  c.n_layer = rung.layers;
  c.n_embd = rung.d_model;
  c.n_head = rung.heads;
  c.vocab_size = vocab;
  c.block_size = context;
  c.dropout = 0.1f;  // GPT-2's and GPT-3's
  return c;
}

std::vector<LargestGpt> largest_gpt(const std::vector<StrategyOptions>& strategies, int64_t batch,
                                    int64_t seq, int64_t vocab, int gpus, const Cluster& c,
                                    const ReplayOptions& o) {
  std::vector<LargestGpt> out;
  const Collectives nccl(c, gpus);
  for (const StrategyOptions& s : strategies) {
    LargestGpt best;
    best.strategy = s;
    const std::vector<GptRung>& ladder = gpt_ladder();
    for (size_t r = 0; r < ladder.size(); ++r) {
      const models::GptConfig config = gpt_rung_config(ladder[r], vocab, seq);
      const Prediction pred = predict_strategy(
          gpt_profile(config, batch, seq, c.gpu, o, s.optimizer), s, gpus, c, o, nccl);
      if (r == 0 || !pred.out_of_memory) {
        if (!pred.out_of_memory) best.rung = static_cast<int>(r);
        if (!pred.out_of_memory || best.rung < 0) {
          best.prediction = pred;
          best.params = gpt_parameters(config);
        }
      }
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace dpe::sim
