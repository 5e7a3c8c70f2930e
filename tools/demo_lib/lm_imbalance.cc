#include "tools/demo_lib/lm_imbalance.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/distributed/fully_sharded_data_parallel.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/nn/checkpoint.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/parallel/data_parallel.h"
#include "tools/common/local_ranks.h"
#include "tools/common/precision.h"
#include "tools/common/train_distributed.h"
#include "tools/cost_model/zero.h"

namespace dpe::tools {
namespace {

Tensor random_tokens(int64_t batch, int64_t context, int64_t vocab, Generator& gen) {
  std::vector<int64_t> v(static_cast<size_t>(batch * context));
  for (int64_t& t : v) t = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(vocab));
  return Tensor::from_vector(v, {batch, context});
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / (1 << 20));
  return buf;
}

// "FSDP FULL_SHARD", "FSDP FULL_SHARD +AC".
std::string row_name(const LmImbalanceRun& r) {
  return std::string(dp_variant_name(r.variant)) + (r.activation_checkpointing ? " +AC" : "");
}

// The run's forward and loss precision: autocast(bfloat16) for bf16, disabled for fp32.
autocast lm_autocast(const LmImbalanceOptions& o, DeviceType type) {
  DPE_CHECK(o.precision == "fp32" || o.precision == "bf16",
            "lm imbalance: precision " << o.precision << " (fp32 or bf16)");
  return autocast_for(o.precision, type);
}

double others_mean_peak(const ImbalanceReport& r) {
  double sum = 0;
  for (size_t d = 1; d < r.devices.size(); ++d) sum += r.devices[d].peak_bytes;
  return r.devices.size() > 1 ? sum / static_cast<double>(r.devices.size() - 1) : 0;
}

}  // namespace

const char* dp_variant_name(DpVariant v) {
  switch (v) {
    case DpVariant::kPlain:
      return "DataParallel";
    case DpVariant::kChunkWeights:
      return "chunk_weights";
    case DpVariant::kParallelLoss:
      return "parallel_criterion";
    case DpVariant::kDdp:
      return "DDP ranks";
    case DpVariant::kDdpZero:
      return "DDP + ZeRO-1";
    case DpVariant::kFsdpGradOp:
      return "FSDP SHARD_GRAD_OP";
    case DpVariant::kFsdpFull:
      return "FSDP FULL_SHARD";
  }
  return "?";
}

bool runs_ranks(DpVariant v) {
  return v == DpVariant::kDdp || v == DpVariant::kDdpZero || v == DpVariant::kFsdpGradOp ||
         v == DpVariant::kFsdpFull;
}

const char* strategy_flag(DpVariant v) {
  switch (v) {
    case DpVariant::kDdpZero:
      return "zero";
    case DpVariant::kFsdpGradOp:
      return "grad-op";
    case DpVariant::kFsdpFull:
      return "full";
    default:
      return "ddp";
  }
}

DpVariant strategy_from_flag(const std::string& flag) {
  for (DpVariant v : {DpVariant::kDdp, DpVariant::kDdpZero, DpVariant::kFsdpGradOp,
                      DpVariant::kFsdpFull}) {
    if (flag == strategy_flag(v)) return v;
  }
  DPE_THROW("lm imbalance: unknown strategy '" << flag << "' (expected ddp, zero, grad-op or full)");
}

double zero_formula_bytes(DpVariant v, int64_t parameters, int devices) {
  const int stage = v == DpVariant::kDdpZero      ? 1
                    : v == DpVariant::kFsdpGradOp ? 2
                    : v == DpVariant::kFsdpFull   ? 3
                                                  : 0;
  return sim::zero_model_state_bytes(stage, parameters, devices, sim::Precision::kFp32, "adamw")
      .total();
}

LmImbalanceRun profile_lm_dp(const LmImbalanceOptions& o, const std::vector<Device>& devices,
                             DpVariant variant) {
  DPE_CHECK(devices.size() >= 2, "lm imbalance: needs at least 2 devices, got " << devices.size());
  DPE_CHECK(o.context <= o.config.block_size, "lm imbalance: context " << o.context
                                                                       << " exceeds the model's "
                                                                       << o.config.block_size);
  Generator gen(o.seed);
  std::shared_ptr<models::Gpt> model;
  {
    MemoryCategoryScope category(MemoryCategory::kParameters);
    model = std::make_shared<models::Gpt>(o.config, gen);
    model->to(devices[0]);  // built on host:0; DataParallel's module lives on device_ids[0]
  }
  DataParallelOptions dpo;
  dpo.device_ids = devices;
  if (variant == DpVariant::kChunkWeights) {
    dpo.chunk_weights.assign(devices.size(), 1.0);
    dpo.chunk_weights[0] = o.device0_weight;
  }
  DataParallel dp(model, dpo);
  StepProfiler prof;
  dp.set_profiler(&prof);
  optim::AdamWOptions ao;
  ao.lr = 3e-4f;
  optim::AdamW opt(model->parameters(), ao);

  LmImbalanceRun run{variant, devices, {}, 0.0f, 0, false, o.precision};
  for (const Tensor& p : model->parameters()) run.parameters += p.numel();
  std::vector<StepStats> stats;
  for (int step = 0; step < o.warmup_steps + o.steps; ++step) {
    const int64_t batch = step < o.warmup_steps
                              ? o.warmup_batch_per_device * static_cast<int64_t>(devices.size())
                              : o.batch;
    const Tensor tokens = random_tokens(batch, o.context + 1, o.config.vocab_size, gen);
    const Tensor input = tokens.narrow(1, 0, o.context).contiguous();
    Tensor target = tokens.narrow(1, 1, o.context).contiguous();
    // The loss runs on device 0 (or beside each replica), where the targets must be.
    if (target.device() != devices[0]) target = target.to(devices[0]);
    prof.begin_step(devices);
    Tensor loss;
    {
      const autocast amp = lm_autocast(o, devices[0].type());  // forward and loss, as PyTorch's
      if (variant == DpVariant::kParallelLoss) {
        const ReplicaOutputs outs = dp.forward_replicas(Value(input));
        loss = parallel_criterion(
            outs, target, 0,
            [](const Tensor& logits, const Tensor& t) { return models::lm_loss(logits, t); },
            devices[0], &prof);
      } else {
        const Tensor logits = dp(input);
        StepProfiler::Scope scope(&prof, devices[0], Phase::kLoss);
        loss = models::lm_loss(logits, target);
      }
    }
    prof.backward(loss);
    {
      StepProfiler::Scope scope(&prof, devices[0], Phase::kStep);
      optim::clip_grad_norm_(model->parameters(), 1.0f);
      opt.step();
      model->zero_grad();
    }
    StepStats s = prof.end_step();
    if (step >= o.warmup_steps) stats.push_back(std::move(s));
    run.last_loss = loss.item();
  }
  run.report = ImbalanceReport::from_steps(stats);
  return run;
}

namespace {

nlohmann::json to_json(const DeviceStepStats& d) {
  return {{"busy_ns", d.busy_ns},
          {"busy_total_ns", d.busy_total_ns},
          {"idle_ns", d.idle_ns},
          {"peak_bytes", d.peak_bytes},
          {"peak_by_category", d.peak_by_category},
          {"held_bytes", d.held_bytes},
          {"peak_model_state_bytes", d.peak_model_state_bytes}};
}

DeviceStepStats device_stats_from_json(const nlohmann::json& j, Device device) {
  DeviceStepStats d;
  d.device = device;
  d.busy_ns = j.at("busy_ns").get<std::array<int64_t, kNumPhases>>();
  d.busy_total_ns = j.at("busy_total_ns").get<int64_t>();
  d.idle_ns = j.at("idle_ns").get<int64_t>();
  d.peak_bytes = j.at("peak_bytes").get<int64_t>();
  d.peak_by_category = j.at("peak_by_category").get<MemoryStats::ByCategory>();
  d.held_bytes = j.at("held_bytes").get<int64_t>();
  d.peak_model_state_bytes = j.at("peak_model_state_bytes").get<int64_t>();
  return d;
}

}  // namespace

void lm_ddp_worker(const LmImbalanceOptions& o, const std::string& result_dir, DpVariant variant) {
  Distributed dist = Distributed::init();
  DPE_CHECK(o.batch % dist.world == 0, "lm imbalance: the global batch "
                                           << o.batch << " does not divide by the world size "
                                           << dist.world);
  const int64_t per_rank = o.batch / dist.world;
  Generator gen(o.seed);
  std::shared_ptr<models::Gpt> model;
  {
    MemoryCategoryScope category(MemoryCategory::kParameters);
    model = std::make_shared<models::Gpt>(o.config, gen);
  }
  int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  if (o.activation_checkpointing) nn::apply_activation_checkpointing(*model, models::is_gpt_block);
  std::shared_ptr<Module> ddp;
  FullyShardedDataParallel* fsdp = nullptr;
  if (variant == DpVariant::kFsdpGradOp || variant == DpVariant::kFsdpFull) {
    FullyShardedDataParallelOptions fo;
    fo.sharding_strategy = variant == DpVariant::kFsdpFull ? ShardingStrategy::kFullShard
                                                           : ShardingStrategy::kShardGradOp;
    fo.auto_wrap_policy = models::is_gpt_block;
    auto wrapped = std::make_shared<FullyShardedDataParallel>(model, dist.group, fo);
    fsdp = wrapped.get();
    ddp = wrapped;
  } else {
    MemoryCategoryScope category(MemoryCategory::kGradients);  // the reducer's buckets
    ddp = dist.wrap(model);
  }
  optim::AdamWOptions ao;
  ao.lr = 3e-4f;
  std::unique_ptr<optim::Optimizer> opt;
  if (variant == DpVariant::kDdpZero) {
    opt = std::make_unique<distributed::ZeroRedundancyOptimizer>(
        model->parameters(),
        [ao](std::vector<Tensor> shard) {
          return std::make_unique<optim::AdamW>(std::move(shard), ao);
        },
        dist.group);
  } else {
    // FSDP's parameters are this rank's flat shards.
    opt = std::make_unique<optim::AdamW>(fsdp ? ddp->parameters() : model->parameters(), ao);
  }
  const Device device = Runtime::get().devices(DeviceType::kHost).at(0);
  StepProfiler prof;
  nlohmann::json steps = nlohmann::json::array();
  float loss_value = 0;
  for (int step = 0; step < o.warmup_steps + o.steps; ++step) {
    // The same global batch as profile_lm_dp draws; this rank trains on its rows.
    const int64_t rows = step < o.warmup_steps ? o.warmup_batch_per_device : per_rank;
    const Tensor tokens = random_tokens(rows * dist.world, o.context + 1, o.config.vocab_size, gen)
                              .narrow(0, rows * dist.rank, rows);
    const Tensor input = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor target = tokens.narrow(1, 1, o.context).contiguous();
    dist.barrier();  // every rank starts the step together
    prof.begin_step({device});
    Tensor logits, loss;
    {
      const autocast amp = lm_autocast(o, device.type());
      {
        StepProfiler::Scope scope(&prof, device, Phase::kForward);
        logits = ddp->forward(input);
      }
      StepProfiler::Scope scope(&prof, device, Phase::kLoss);
      loss = models::lm_loss(logits, target);
    }
    logits = Tensor();
    prof.backward(loss);
    {
      StepProfiler::Scope scope(&prof, device, Phase::kStep);
      if (fsdp) {
        fsdp->clip_grad_norm_(1.0f);
      } else {
        optim::clip_grad_norm_(model->parameters(), 1.0f);
      }
      opt->step();
      opt->zero_grad();
    }
    const StepStats s = prof.end_step();
    if (step >= o.warmup_steps) {
      steps.push_back({{"wall_ns", s.wall_ns}, {"device", to_json(s.devices.at(0))}});
    }
    loss_value = loss.item();
  }
  const std::string path = result_dir + "/rank" + std::to_string(dist.rank) + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"steps", steps}, {"loss", loss_value}, {"parameters", parameters}}.dump();
    DPE_CHECK(out.good(), "lm imbalance: cannot write " << tmp);
  }
  DPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "lm imbalance: cannot write " << path);
  dist.barrier();
}

LmImbalanceRun profile_lm_ddp(const LmImbalanceOptions& o, int world,
                              std::vector<std::string> worker_argv, DpVariant variant) {
  DPE_CHECK(runs_ranks(variant), "lm imbalance: " << dp_variant_name(variant)
                                                  << " does not run one process per device");
  DPE_CHECK(world >= 2, "lm imbalance: DDP needs at least 2 ranks, got " << world);
  char dir_template[] = "/tmp/dpe_lm_ddp_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  DPE_CHECK(dir != nullptr, "lm imbalance: cannot create a temporary folder");
  // The ranks need as much memory as DataParallel's devices did: give back what this process's
  // allocators cache and what malloc keeps before starting them.
  Runtime::get().empty_cache();
  worker_argv.push_back("--lm-ddp-worker");
  worker_argv.push_back(dir);
  worker_argv.push_back("--lm-strategy");
  worker_argv.push_back(strategy_flag(variant));
  if (o.activation_checkpointing) worker_argv.push_back("--lm-activation-checkpointing");
  worker_argv.insert(worker_argv.end(), {"--lm-precision", o.precision});
  const int failed = run_local_ranks(worker_argv, world);
  std::vector<nlohmann::json> ranks;
  for (int r = 0; r < world; ++r) {
    const std::string path = std::string(dir) + "/rank" + std::to_string(r) + ".json";
    std::ifstream in(path);
    if (in.good()) ranks.push_back(nlohmann::json::parse(in, nullptr, false));
    std::remove(path.c_str());
  }
  rmdir(dir);
  DPE_CHECK(failed == 0 && ranks.size() == static_cast<size_t>(world),
            "lm imbalance: " << failed << " of " << world << " DDP ranks failed (" << ranks.size()
                             << " wrote a result)");
  LmImbalanceRun run{variant,
                     {},
                     {},
                     0.0f,
                     ranks[0].at("parameters").get<int64_t>(),
                     o.activation_checkpointing,
                     o.precision};
  for (int r = 0; r < world; ++r) run.devices.emplace_back(DeviceType::kHost, r);
  std::vector<StepStats> stats;
  const size_t steps = ranks[0].at("steps").size();
  for (size_t s = 0; s < steps; ++s) {
    StepStats step;
    for (int r = 0; r < world; ++r) {
      const nlohmann::json& j = ranks[static_cast<size_t>(r)].at("steps").at(s);
      step.wall_ns = std::max(step.wall_ns, j.at("wall_ns").get<int64_t>());
      step.devices.push_back(device_stats_from_json(j.at("device"), run.devices[r]));
    }
    stats.push_back(std::move(step));
  }
  for (const nlohmann::json& j : ranks) run.last_loss += j.at("loss").get<float>() / world;
  run.report = ImbalanceReport::from_steps(stats);
  return run;
}

std::string lm_imbalance_table(const std::vector<LmImbalanceRun>& runs) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %4s %4s %10s %12s %6s %8s  %-22s  %-44s  %s\n", "",
                "prec", "devs", "dev0 peak", "others' mean", "ratio", "step ms",
                "model states / ZeRO",
                "device 0 extra (MiB) by category",
                "device 0 busy ms: scatter+replicate / forward / gather+loss / backward / "
                "reduce-add / step");
  out += line;
  // The conclusions compare the rows of one device count and one precision.
  std::map<std::pair<size_t, std::string>, std::vector<const LmImbalanceRun*>> by_count;
  for (const LmImbalanceRun& r : runs) {
    by_count[{r.devices.size(), r.precision}].push_back(&r);
    const ImbalanceReport& rep = r.report;
    const double others = others_mean_peak(rep);
    // The three largest categories of device 0's extra, then the rest summed; for DDP, whose
    // ranks hold the same, what rank 0 holds.
    const bool ddp = runs_ranks(r.variant);
    std::vector<std::pair<double, size_t>> extra;
    for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
      extra.emplace_back(ddp ? rep.devices[0].peak_by_category[c] : rep.extra_peak_by_category[c],
                         c);
    }
    std::sort(extra.rbegin(), extra.rend());
    std::string cats;
    double rest = 0;
    for (size_t i = 0; i < extra.size(); ++i) {
      if (i < 3 && extra[i].first > (1 << 19)) {
        if (!cats.empty()) cats += ", ";
        cats += memory_category_name(static_cast<MemoryCategory>(extra[i].second));
        cats += " " + mib(extra[i].first);
      } else {
        rest += extra[i].first;
      }
    }
    if (std::abs(rest) > (1 << 19)) cats += ", rest " + mib(rest);
    if (ddp) cats = "each rank: " + cats;
    const auto& b = rep.devices[0].busy_ms;
    auto ms = [&](Phase p) { return b[static_cast<int>(p)]; };
    // Device 0's (rank 0's) parameters, gradients and optimizer state held together, beside the
    // ZeRO paper's prediction for the row's stage.
    const double states = rep.devices[0].peak_model_state_bytes;
    const double formula =
        zero_formula_bytes(r.variant, r.parameters, static_cast<int>(r.devices.size()));
    char model_states[64];
    std::snprintf(model_states, sizeof model_states, "%s / %s %+.0f%%", mib(states).c_str(),
                  mib(formula).c_str(), formula > 0 ? 100.0 * (states / formula - 1) : 0.0);
    std::snprintf(line, sizeof line,
                  "%-22s %4s %4zu %10s %12s %5.2fx %8.0f  %-22s  %-44s  %.0f / %.0f / %.0f / "
                  "%.0f / %.0f / %.0f\n",
                  row_name(r).c_str(), r.precision.c_str(), r.devices.size(),
                  mib(rep.devices[0].peak_bytes).c_str(), mib(others).c_str(), rep.extra_peak_ratio,
                  rep.step_ms, model_states, cats.c_str(), ms(Phase::kScatter) + ms(Phase::kReplicate), ms(Phase::kForward),
                  ms(Phase::kGather) + ms(Phase::kLoss), ms(Phase::kBackward),
                  ms(Phase::kReduceAdd), ms(Phase::kStep));
    out += line;
  }
  for (const auto& [key, group] : by_count) {
    const auto& [count, precision] = key;
    const LmImbalanceRun* plain = nullptr;
    for (const LmImbalanceRun* r : group) {
      if (r->variant == DpVariant::kPlain) plain = r;
    }
    if (plain == nullptr) continue;
    std::string conclusion = "on " + std::to_string(count) + " devices in " + precision +
                             ", device 0 holds " +
                             mib(plain->report.extra_peak_bytes) + " MiB more than the others (x" +
                             std::to_string(plain->report.extra_peak_ratio).substr(0, 4) + ")";
    for (const LmImbalanceRun* r : group) {
      if (r == plain) continue;
      if (runs_ranks(r->variant)) {
        // No parameter server: the ranks' spread, (max - min) / mean of their peaks.
        double lo = 0, hi = 0, sum = 0;
        for (const DeviceSummary& d : r->report.devices) {
          lo = lo == 0 ? d.peak_bytes : std::min(lo, d.peak_bytes);
          hi = std::max(hi, d.peak_bytes);
          sum += d.peak_bytes;
        }
        const double mean = sum / static_cast<double>(r->report.devices.size());
        std::snprintf(line, sizeof line, "; %s: %s MiB a rank (spread %.1f%%)",
                      row_name(*r).c_str(), mib(mean).c_str(), 100.0 * (hi - lo) / mean);
        conclusion += line;
        continue;
      }
      const double removed = 1.0 - r->report.extra_peak_bytes / plain->report.extra_peak_bytes;
      std::snprintf(line, sizeof line, "; %s removes %.0f%% of it (x%.2f)",
                    dp_variant_name(r->variant), 100.0 * removed, r->report.extra_peak_ratio);
      conclusion += line;
    }
    out += conclusion + "\n";
  }
  return out;
}

}  // namespace dpe::tools
