#include "tools/lm_imbalance.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/parallel/data_parallel.h"

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

double others_mean_peak(const ImbalanceReport& r) {
  double sum = 0;
  for (size_t d = 1; d < r.devices.size(); ++d) sum += r.devices[d].peak_bytes;
  return r.devices.size() > 1 ? sum / static_cast<double>(r.devices.size() - 1) : 0;
}

}  // namespace

const char* dp_variant_name(DpVariant v) {
  switch (v) {
    case DpVariant::kPlain: return "DataParallel";
    case DpVariant::kChunkWeights: return "chunk_weights";
    case DpVariant::kParallelLoss: return "parallel_criterion";
  }
  return "?";
}

LmImbalanceRun profile_lm_dp(const LmImbalanceOptions& o, const std::vector<Device>& devices,
                             DpVariant variant) {
  DPE_CHECK(devices.size() >= 2, "lm imbalance: needs at least 2 devices, got " << devices.size());
  DPE_CHECK(o.context <= o.config.block_size, "lm imbalance: context " << o.context
                                                  << " exceeds the model's " << o.config.block_size);
  Generator gen(o.seed);
  std::shared_ptr<models::Gpt> model;
  {
    MemoryCategoryScope category(MemoryCategory::kParameters);
    model = std::make_shared<models::Gpt>(o.config, gen);
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

  LmImbalanceRun run{variant, devices, {}, 0.0f};
  std::vector<StepStats> stats;
  for (int step = 0; step < o.warmup_steps + o.steps; ++step) {
    const Tensor tokens = random_tokens(o.batch, o.context + 1, o.config.vocab_size, gen);
    const Tensor input = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor target = tokens.narrow(1, 1, o.context).contiguous();
    prof.begin_step(devices);
    Tensor loss;
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

std::string lm_imbalance_table(const std::vector<LmImbalanceRun>& runs) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-19s %4s %10s %12s %6s  %-44s  %s\n", "", "devs",
                "dev0 peak", "others' mean", "ratio", "device 0 extra (MiB) by category",
                "device 0 busy ms: scatter+replicate / forward / gather+loss / backward / "
                "reduce-add / step");
  out += line;
  std::map<size_t, std::vector<const LmImbalanceRun*>> by_count;
  for (const LmImbalanceRun& r : runs) {
    by_count[r.devices.size()].push_back(&r);
    const ImbalanceReport& rep = r.report;
    const double others = others_mean_peak(rep);
    // The three largest categories of device 0's extra, then the rest summed.
    std::vector<std::pair<double, size_t>> extra;
    for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
      extra.emplace_back(rep.extra_peak_by_category[c], c);
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
    const auto& b = rep.devices[0].busy_ms;
    auto ms = [&](Phase p) { return b[static_cast<int>(p)]; };
    std::snprintf(line, sizeof line,
                  "%-19s %4zu %10s %12s %5.2fx  %-44s  %.0f / %.0f / %.0f / %.0f / %.0f / %.0f\n",
                  dp_variant_name(r.variant), r.devices.size(),
                  mib(rep.devices[0].peak_bytes).c_str(), mib(others).c_str(),
                  rep.extra_peak_ratio, cats.c_str(), ms(Phase::kScatter) + ms(Phase::kReplicate),
                  ms(Phase::kForward), ms(Phase::kGather) + ms(Phase::kLoss), ms(Phase::kBackward),
                  ms(Phase::kReduceAdd), ms(Phase::kStep));
    out += line;
  }
  for (const auto& [count, group] : by_count) {
    const LmImbalanceRun* plain = nullptr;
    for (const LmImbalanceRun* r : group) {
      if (r->variant == DpVariant::kPlain) plain = r;
    }
    if (plain == nullptr) continue;
    std::string conclusion = "on " + std::to_string(count) + " devices, device 0 holds " +
                             mib(plain->report.extra_peak_bytes) + " MiB more than the others (x" +
                             std::to_string(plain->report.extra_peak_ratio).substr(0, 4) + ")";
    for (const LmImbalanceRun* r : group) {
      if (r == plain) continue;
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
