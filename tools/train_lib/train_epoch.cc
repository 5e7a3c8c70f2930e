#include "tools/train_lib/train_epoch.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/distributed/fully_sharded_data_parallel.h"
#include "engine/optim/clip_grad.h"
#include "models/gpt.h"
#include "tools/common/precision.h"
#include "tools/train_lib/progress.h"

namespace dpe::tools {

namespace {

// The device type the run's forward computes on, whose autocast --precision bf16 or fp16 enables.
DeviceType autocast_device_type(const TrainConfig& c) {
  return c.device == "cuda" ? DeviceType::kCuda : DeviceType::kHost;
}

Tensor loss_of(const Tensor& out, const Tensor& target, const Data& data) {
  if (data.language_model) return models::lm_loss(out, target);
  return data.classification ? ops::cross_entropy(out, target) : ops::mse_loss(out, target);
}

// `input` where the run's forward takes it (a batch is loaded on host:0), images channels last
// when the run asks.
Tensor on_input_device(const Run& run, const Tensor& input) {
  if (run.c.channels_last && input.dim() == 4) {
    return input.to(run.input_device.value_or(input.device()), MemoryFormat::kChannelsLast);
  }
  return run.input_device && input.device() != *run.input_device ? input.to(*run.input_device)
                                                                 : input;
}

}  // namespace

EpochMetrics train_epoch(const Run& run, int epoch, Sampler& sampler, DataLoader& loader,
                         int64_t max_batches) {
  const TrainConfig& c = run.c;
  run.net.train();
  sampler.set_epoch(epoch);
  const int64_t batches = std::min(loader.size(), max_batches);
  Progress progress("epoch " + std::to_string(epoch), batches, run.out, run.main && c.progress);
  int64_t step = 0;
  while (step < batches) {
    std::optional<Batch> b = loader.next();
    if (!b) break;
    Tensor output, loss;
    {
      const autocast amp = autocast_for(run.c.precision, autocast_device_type(run.c));
      output = run.net.forward(on_input_device(run, b->input));
      loss = loss_of(output, b->target.to(output.device()), run.data);
    }
    DPE_CHECK(ops::all_finite(loss), "non-finite loss ("
                                         << loss.item() << ") at epoch " << epoch << ", step "
                                         << step << "; stopping. The last good checkpoint"
                                         << (c.checkpoint_dir.empty()
                                                 ? " (none: no --checkpoint-dir)"
                                                 : " in " + c.checkpoint_dir + " is intact"));
    run.opt.zero_grad();
    backward(run.scaler != nullptr ? run.scaler->scale(loss) : loss);
    // DataParallel: the gradients were reduced onto device 0's parameters, clipped there; DDP:
    // each rank clips its all-reduced (identical) gradients.
    // FSDP: the norm over every rank's shards.
    if (c.clip_grad_norm > 0) {
      if (run.scaler != nullptr) run.scaler->unscale_(run.opt);  // clip the true gradients
      if (auto* fsdp = dynamic_cast<FullyShardedDataParallel*>(&run.net)) {
        fsdp->clip_grad_norm_(c.clip_grad_norm);
      } else {
        optim::clip_grad_norm_(run.model.parameters(), c.clip_grad_norm);
      }
    }
    if (run.scaler != nullptr) {
      run.scaler->step(run.opt);  // skipped when a gradient overflowed
      run.scaler->update();
    } else {
      run.opt.step();
    }
    // The line shows the whole job: every rank's samples and the loss averaged over ranks.
    progress.update(b->input.size(0) * run.dist.world, run.dist.reduce_mean(loss.item()));
    ++step;
  }
  // Drain the rest of the pass when it was cut short, so the next epoch starts afresh.
  while (loader.next()) {
  }
  EpochMetrics m;
  m.epoch = epoch;
  m.steps = step;
  m.train_loss = progress.mean_loss();
  m.samples_per_second = progress.finish();
  if (run.data.language_model) m.tokens_per_second = m.samples_per_second * c.context;
  return m;
}

void evaluate(const Run& run, DataLoader& test_loader, EpochMetrics& m) {
  const Data& data = run.data;
  run.net.eval();
  double loss_sum = 0, correct = 0, count = 0;
  {
    NoGradGuard no_grad;
    for (Batch& tb : test_loader) {
      Tensor o;
      {
        const autocast amp = autocast_for(run.c.precision, autocast_device_type(run.c));
        o = run.net.forward(on_input_device(run, tb.input));
      }
      o = o.to(DType::kFloat32);  // the accuracy's argmax and the loss read float32
      Tensor t = tb.target.to(o.device());
      const double n = static_cast<double>(tb.input.size(0));
      loss_sum += loss_of(o, t, data).item() * n;
      count += n;
      if (data.classification) {
        const auto pred = ops::argmax_rows(o).to_vector<int64_t>();
        const auto truth = t.to_vector<int64_t>();
        for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
      }
    }
  }
  const std::vector<double> sums = run.dist.sum({loss_sum, correct, count});
  m.test_loss = sums[0] / std::max(sums[2], 1.0);
  if (data.classification) m.test_accuracy = sums[1] / std::max(sums[2], 1.0);
  if (data.language_model) {
    // Every window has `context` targets, so the mean over windows is the mean over tokens.
    m.perplexity = std::exp(m.test_loss);
    m.unigram_perplexity = data.unigram_perplexity;
  }
}

void print_epoch(const EpochMetrics& m, bool language_model, FILE* out) {
  if (language_model) {
    std::fprintf(out,
                 "epoch %d: train loss %.4f, val loss %.4f, val perplexity %.1f (unigram "
                 "baseline %.1f), %.0f tokens/s\n",
                 m.epoch, m.train_loss, m.test_loss, m.perplexity, m.unigram_perplexity,
                 m.tokens_per_second);
  } else {
    std::fprintf(out, "epoch %d: train loss %.4f, test loss %.4f", m.epoch, m.train_loss,
                 m.test_loss);
    if (m.test_accuracy >= 0) std::fprintf(out, ", test accuracy %.2f%%", 100 * m.test_accuracy);
    std::fprintf(out, ", %.0f samples/s\n", m.samples_per_second);
  }
}

}  // namespace dpe::tools
