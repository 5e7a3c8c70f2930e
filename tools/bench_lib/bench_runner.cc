#include "tools/bench_lib/bench_runner.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/dispatch.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/fully_sharded_data_parallel.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/nn/fusion.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/imbalance_report.h"
#include "engine/trace/op_trace.h"
#include "models/by_name.h"
#include "models/gpt.h"
#include "models/resnet.h"
#include "tools/common/activation_checkpointing.h"
#include "tools/common/devices.h"
#include "tools/common/local_ranks.h"
#include "tools/common/precision.h"
#include "tools/common/train_distributed.h"

namespace dpe::tools {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

// The language-model corpus's vocabulary (engine/data/token_cache.h), which //tools:train gives
// the gpt models.
constexpr int64_t kLmVocab = 32000;

// resnet50 trains on random images and labels; the other image models on Fashion-MNIST.
bool synthetic_images(const std::string& model) { return model == "resnet50"; }

// A fixed batch of real data (or the toy's synthetic one, random images or random tokens) on
// host:0.
std::pair<Tensor, Tensor> make_batch(const BenchConfig& c, int64_t n, int64_t offset) {
  if (models::is_language_model(c.model)) {
    const int64_t t = bench_context(c.model, c.context);
    Generator g(static_cast<uint64_t>(offset) + 1);
    std::vector<int64_t> v(static_cast<size_t>(n * (t + 1)));
    for (int64_t& id : v) id = static_cast<int64_t>(g.next_u64() % kLmVocab);
    const Tensor tokens = Tensor::from_vector(v, {n, t + 1});
    return {tokens.narrow(1, 0, t).contiguous(), tokens.narrow(1, 1, t).contiguous()};
  }
  if (c.model == "toy") {
    Generator g(static_cast<uint64_t>(offset) + 1);
    return {randn({n, 10}, g), randn({n, 5}, g)};
  }
  if (synthetic_images(c.model)) {
    const int64_t side = bench_image(c.model, c.image);
    const int64_t classes = models::resnet_config(c.model).num_classes;
    Generator g(static_cast<uint64_t>(offset) + 1);
    std::vector<int64_t> labels(static_cast<size_t>(n));
    for (int64_t& l : labels)
      l = static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(classes));
    return {randn({n, 3, side, side}, g), Tensor::from_vector(labels, {n})};
  }
  FashionMnist train(c.data_dir.empty() ? FashionMnist::kDefaultRoot : c.data_dir, true);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = (offset + i) % train.size();
  Batch b = train.get_batch(idx);
  return {b.input, b.target};
}

Tensor loss_for(const std::string& model, const Tensor& out, const Tensor& y) {
  if (models::is_language_model(model)) return models::lm_loss(out, y);
  return model == "toy" ? ops::mse_loss(out, y) : ops::cross_entropy(out, y);
}

std::shared_ptr<Module> bench_model(const BenchConfig& c, Generator& gen) {
  models::ModelOptions mo;
  if (models::is_language_model(c.model)) mo.vocab_size = kLmVocab;
  // Fashion-MNIST's images have one channel (as //tools:train gives resnet-tiny).
  if (c.model == "resnet-tiny") mo.in_channels = 1;
  std::shared_ptr<Module> model = models::make_model(c.model, gen, mo);
  if (c.activation_checkpointing) apply_activation_checkpointing_flag(c.model, *model);
  return model;
}

// //tools:train's optimizers: AdamW (PyTorch's defaults, lr 1e-3) for the gpt models, SGD with
// momentum for the others.
std::unique_ptr<optim::Optimizer> bench_optimizer(const std::string& model,
                                                  std::vector<Tensor> params) {
  if (models::is_language_model(model)) {
    optim::AdamWOptions o;
    o.lr = 1e-3f;
    return std::make_unique<optim::AdamW>(std::move(params), o);
  }
  optim::SgdOptions so;
  so.lr = 0.01f;
  so.momentum = 0.9f;
  return std::make_unique<optim::SGD>(std::move(params), so);
}

// The optimizer step as //tools:train takes it (gpt: the gradients clipped at 1.0 first).
// The step after backward: a language model's gradients clipped (unscaled first under fp16),
// the optimizer's update (the scaler's, skipped after an overflow, under fp16).
void optimizer_step(const std::string& model, Module& m, optim::Optimizer& opt,
                    optim::GradScaler& scaler) {
  if (models::is_language_model(model)) {
    scaler.unscale_(opt);
    optim::clip_grad_norm_(m.parameters(), 1.0f);
  }
  scaler.step(opt);
  scaler.update();
  opt.zero_grad();
}

// --precision's GradScaler (disabled unless fp16).
optim::GradScalerOptions scaler_options(const BenchConfig& c) {
  optim::GradScalerOptions o;
  o.enabled = needs_grad_scaler(c.precision);
  return o;
}

void set_rates(BenchResult& r) {
  const BenchConfig& c = r.config;
  r.samples_per_second = static_cast<double>(c.global_batch) / (r.step_ms / 1000.0);
  r.tokens_per_second =
      r.samples_per_second * static_cast<double>(bench_context(c.model, c.context));
  r.gflops = r.samples_per_second * training_flops_per_sample(c.model, c.context, c.image) / 1e9;
}

// A ResNet's forward multiply-adds on `in_channels` x h x w images, counted from the layer
// shapes as the model builds them (models/resnet.cc): conv1 7x7 stride 2, the 3x3 stride-2
// maxpool, Bottlenecks (1x1, 3x3 with the stride, 1x1, and the 1x1 strided downsample of a
// stage's first block), fc. `*first` gets conv1's, whose input gradient training skips.
double resnet_forward_macs(const models::ResNetConfig& rc, int64_t in_channels, int64_t h,
                           int64_t w, double* first) {
  auto out = [](int64_t size, int64_t k, int64_t stride, int64_t pad) {
    return (size + 2 * pad - k) / stride + 1;
  };
  h = out(h, 7, 2, 3);
  w = out(w, 7, 2, 3);
  *first = static_cast<double>(h * w) * static_cast<double>(rc.width * in_channels * 49);
  double macs = *first;
  h = out(h, 3, 2, 1);
  w = out(w, 3, 2, 1);
  int64_t in = rc.width;
  for (size_t k = 0; k < rc.layers.size(); ++k) {
    const int64_t width = rc.width << k, expanded = width * 4;
    for (int64_t b = 0; b < rc.layers[k]; ++b) {
      const int64_t stride = (b == 0 && k > 0) ? 2 : 1;
      const int64_t oh = out(h, 3, stride, 1), ow = out(w, 3, stride, 1);
      macs += static_cast<double>(h * w) * static_cast<double>(in * width);           // conv1
      macs += static_cast<double>(oh * ow) * static_cast<double>(width * width * 9);  // conv2
      macs += static_cast<double>(oh * ow) * static_cast<double>(width * expanded);   // conv3
      if (stride != 1 || in != expanded) {
        macs += static_cast<double>(oh * ow) * static_cast<double>(in * expanded);  // downsample
      }
      in = expanded;
      h = oh;
      w = ow;
    }
  }
  return macs + static_cast<double>(in * rc.num_classes);  // fc
}

// The batch where the step takes it (host:0 is where it is made), its images channels last when
// asked.
std::pair<Tensor, Tensor> on_device(std::pair<Tensor, Tensor> batch, Device device,
                                    bool channels_last) {
  if (channels_last && batch.first.dim() == 4) {
    batch.first = batch.first.to(device, MemoryFormat::kChannelsLast);
  } else if (batch.first.device() != device) {
    batch.first = batch.first.to(device);
  }
  if (batch.second.device() != device) batch.second = batch.second.to(device);
  return batch;
}

// Waits for what the devices queued (CUDA returns before its kernels finish; host devices have
// finished already), so that a step's time is its work's.
void finish_queued_work(const std::vector<Device>& devices) {
  for (const Device& d : devices) {
    if (!d.is_host()) Runtime::get().context(d).synchronize();
  }
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int64_t bench_context(const std::string& model, int64_t context) {
  if (!models::is_language_model(model)) return 0;
  const int64_t block = models::gpt_config(model).block_size;
  DPE_CHECK(context >= 0 && context <= block, "context " << context << " must be between 1 and "
                                                         << model << "'s block size " << block);
  return context > 0 ? context : block;
}

int64_t bench_image(const std::string& model, int64_t image) {
  if (!synthetic_images(model)) return 0;
  DPE_CHECK(image >= 0, "image size " << image << " must be at least 1");
  return image > 0 ? image : 224;
}

double training_flops_per_sample(const std::string& model, int64_t context, int64_t image) {
  // Multiply-adds of the forward pass, counted by hand from the layer shapes (x2 for FLOPs).
  if (models::is_language_model(model)) {
    // Per token: each block's c_attn, c_proj and MLP (12 d^2), its attention scores and their
    // product with the values (2 T d, the full square: the kernels compute it) and the tied head
    // (d V). Training is 3x the forward; the embedding lookup has no product to count.
    const models::GptConfig g = models::gpt_config(model);
    const double t = static_cast<double>(bench_context(model, context));
    const double d = static_cast<double>(g.n_embd);
    const double per_token = static_cast<double>(g.n_layer) * (12 * d * d + 2 * t * d) +
                             d * static_cast<double>(kLmVocab);
    return 2.0 * 3 * per_token * t;
  }
  if (model == "resnet50" || model == "resnet-tiny") {
    const bool fashion = model == "resnet-tiny";
    const int64_t side = fashion ? 28 : bench_image(model, image);
    double first = 0;
    const double macs =
        resnet_forward_macs(models::resnet_config(model), fashion ? 1 : 3, side, side, &first);
    return 2.0 * (3 * macs - first);
  }
  if (model == "toy") return 2.0 * (3 * (10 * 10 + 10 * 5) - 10 * 10);
  if (model == "mlp") {
    const double l1 = 784 * 512, l2 = 512 * 512, l3 = 512 * 10;
    return 2.0 * (3 * (l1 + l2 + l3) - l1);
  }
  const double c1 = 28 * 28 * 16 * 25.0, c2 = 14 * 14 * 32 * 16 * 25.0, fc = 1568 * 10.0;
  return 2.0 * (3 * (c1 + c2 + fc) - c1);
}

BenchResult run_in_process(const BenchConfig& c) {
  DPE_CHECK(c.mode == "single" || c.mode == "dp", "run_in_process: mode " << c.mode);
  DPE_CHECK(c.dp_loss == "device0" || c.dp_loss == "replicas",
            "run_in_process: dp_loss '" << c.dp_loss << "' (expected device0 or replicas)");
  const nn::FusionScope fusion(c.fuse);
  const DeviceType type = parse_device_type(c.device);
  if (type == DeviceType::kHost) set_host_devices({std::max(c.devices, 2), c.threads, 0});
  const std::vector<Device> devices = tool_devices(type, c.devices);

  Generator gen(0);
  std::shared_ptr<Module> model = bench_model(c, gen);
  model->to(devices[0]);
  std::shared_ptr<DataParallel> dp;
  if (c.mode == "dp") dp = std::make_shared<DataParallel>(model, devices);
  Module& net = dp ? static_cast<Module&>(*dp) : *model;
  StepProfiler prof;
  if (dp) dp->set_profiler(&prof);
  std::unique_ptr<optim::Optimizer> opt = bench_optimizer(c.model, model->parameters());
  optim::GradScaler scaler(scaler_options(c));
  auto [x, y] = on_device(make_batch(c, c.global_batch, 0), devices[0], c.channels_last);

  std::vector<double> times;
  std::vector<StepStats> stats;
  Tensor last_loss;
  // The step's forward and loss: on device 0 over the gathered outputs, or on every replica.
  const bool replicas_loss = dp && c.dp_loss == "replicas";
  auto forward_loss = [&](StepProfiler* p) {
    const autocast amp = autocast_for(c.precision, type);
    if (replicas_loss) {
      const ReplicaOutputs outs = dp->forward_replicas(Value(x));
      return parallel_criterion(
          outs, y, 0, [&](const Tensor& o, const Tensor& t) { return loss_for(c.model, o, t); },
          devices[0], p);
    }
    Tensor out = net.forward(x);
    StepProfiler::Scope scope(p, devices[0], Phase::kLoss);
    return loss_for(c.model, out, y);
  };
  for (int s = 0; s < c.warmup + c.steps; ++s) {
    const auto start = Clock::now();
    prof.begin_step(devices);
    Tensor loss = forward_loss(&prof);
    prof.backward(scaler.scale(loss));
    last_loss = loss;
    {
      StepProfiler::Scope scope(&prof, devices[0], Phase::kStep);
      optimizer_step(c.model, *model, *opt, scaler);
    }
    finish_queued_work(devices);
    StepStats st = prof.end_step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (s >= c.warmup) {
      times.push_back(ms);
      stats.push_back(st);
    }
  }
  BenchResult r;
  r.config = c;
  r.step_ms = median(times);
  r.final_loss = last_loss.item();
  set_rates(r);
  if (type == DeviceType::kHost) {
    // One more step, traced: the roofline's input (roofline.h). The profiler stays out of it
    // (its bookkeeping is not the step's work) and the timed steps are already measured.
    if (dp) dp->set_profiler(nullptr);
    OpTrace trace;
    Tensor loss = forward_loss(nullptr);
    backward(scaler.scale(loss));
    optimizer_step(c.model, *model, *opt, scaler);
    finish_queued_work(devices);
    r.traced_step = trace.stop();
    if (dp) dp->set_profiler(&prof);
  }
  ImbalanceReport report = ImbalanceReport::from_steps(stats);
  for (const DeviceSummary& d : report.devices) {
    DeviceUse u;
    u.device = d.device.str();
    u.peak_bytes = d.peak_bytes;
    u.busy_share = c.mode == "single" || report.step_ms <= 0
                       ? 1.0
                       : std::min(1.0, d.busy_total_ms / report.step_ms);
    r.devices.push_back(u);
  }
  for (int p = 0; p < kNumPhases; ++p) r.phase_ms.push_back(report.devices[0].busy_ms[p]);
  std::vector<double> handoffs, waits;
  for (const StepStats& st : stats) {
    int64_t n = 0, ns = 0;
    for (const DeviceStepStats& d : st.devices) {
      n += d.handoffs;
      ns += d.handoff_wait_ns;
    }
    handoffs.push_back(static_cast<double>(n));
    waits.push_back(n > 0 ? static_cast<double>(ns) / 1e3 / static_cast<double>(n) : 0.0);
  }
  r.handoffs_per_step = median(handoffs);
  r.handoff_wait_us = median(waits);
  return r;
}

void ddp_worker(const BenchConfig& c, const std::string& result_path) {
  const nn::FusionScope fusion(c.fuse);
  const DeviceType type = parse_device_type(c.device);
  if (type == DeviceType::kHost) set_host_devices({1, c.threads, 0});
  Distributed dist = Distributed::init(c.ddp_backend);
  // One device per rank: host:0 of this process, or cuda:LOCAL_RANK as torchrun's ranks use.
  const Device device =
      type == DeviceType::kHost ? Device() : tool_cuda_device(distributed::get_local_rank());
  DPE_CHECK(
      c.global_batch % dist.world == 0,
      "the global batch " << c.global_batch << " must divide by the world size " << dist.world);
  const int64_t per_rank = c.global_batch / dist.world;
  Generator gen(0);
  std::shared_ptr<Module> model = bench_model(c, gen);
  model->to(device);
  std::shared_ptr<Module> ddp;
  FullyShardedDataParallel* fsdp = nullptr;
  bool overlap = false;
  if (!c.sharding.empty()) {
    FullyShardedDataParallelOptions fo;
    fo.sharding_strategy =
        c.sharding == "full" ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp;
    fo.auto_wrap_policy = models::is_gpt_block;
    auto wrapped = std::make_shared<FullyShardedDataParallel>(model, dist.group, fo);
    fsdp = wrapped.get();
    ddp = wrapped;
  } else {
    ddp = dist.wrap(model, c.bucket_view, c.overlap, c.comm_hook);
    overlap = std::static_pointer_cast<DistributedDataParallel>(ddp)->overlaps_backward();
  }
  // ZeRO-1: each rank steps its shard with the same optimizer, then broadcasts it. FSDP: the
  // optimizer steps this rank's flat shards.
  std::unique_ptr<optim::Optimizer> opt =
      c.zero ? std::make_unique<distributed::ZeroRedundancyOptimizer>(
                   model->parameters(),
                   [&c](std::vector<Tensor> shard) {
                     return bench_optimizer(c.model, std::move(shard));
                   },
                   dist.group)
             : bench_optimizer(c.model, fsdp ? ddp->parameters() : model->parameters());
  optim::GradScaler scaler(scaler_options(c));  // fp16 only, and never with FSDP (bench.cc)
  auto [x, y] =
      on_device(make_batch(c, per_rank, per_rank * dist.rank), device, c.channels_last);
  DeviceContext& ctx = Runtime::get().context(device);
  std::vector<double> times, busy;
  Tensor last_loss;
  int64_t bytes_before = 0;  // what the group had been handed when the timed steps began
  for (int s = 0; s < c.warmup + c.steps; ++s) {
    dist.barrier();  // every rank starts the step together
    if (s == c.warmup) {
      ctx.allocator().reset_peak();
      bytes_before = dist.group->bytes_submitted();
    }
    const double cpu0 = thread_cpu_seconds();
    const auto start = Clock::now();
    {
      const autocast amp = autocast_for(c.precision, device.type());
      Tensor out = ddp->forward(x);
      last_loss = loss_for(c.model, out, y);
    }
    backward(scaler.scale(last_loss));
    if (fsdp != nullptr && models::is_language_model(c.model)) {
      fsdp->clip_grad_norm_(1.0f);  // the norm over every rank's shards
      opt->step();
      opt->zero_grad();
    } else {
      optimizer_step(c.model, *model, *opt, scaler);
    }
    finish_queued_work({device});
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (s >= c.warmup) {
      times.push_back(ms);
      busy.push_back(std::min(1.0, (thread_cpu_seconds() - cpu0) * 1000.0 / ms));
    }
  }
  // This rank's bytes handed to the group per timed step (the barriers carry none).
  const double bytes_per_step =
      static_cast<double>(dist.group->bytes_submitted() - bytes_before) / c.steps;
  // Rank 0 collects every rank's peak memory and busy share.
  const double mine[2] = {static_cast<double>(ctx.allocator().stats().peak_bytes), median(busy)};
  std::vector<double> all(static_cast<size_t>(2 * dist.world), 0.0);
  all[2 * dist.rank] = mine[0];
  all[2 * dist.rank + 1] = mine[1];
  all = dist.sum(all);
  if (dist.rank == 0) {
    nlohmann::json j;
    j["step_ms"] = median(times);
    j["overlap_during_backward"] = overlap;
    j["final_loss"] = last_loss.item();
    j["bytes_per_step"] = bytes_per_step;
    for (int r = 0; r < dist.world; ++r) {
      const std::string name = type == DeviceType::kHost ? "host:0" : "cuda:" + std::to_string(r);
      j["devices"].push_back({{"device", "rank" + std::to_string(r) + ":" + name},
                              {"peak_bytes", all[2 * r]},
                              {"busy_share", all[2 * r + 1]}});
    }
    std::ofstream(result_path) << j.dump();
  }
  dist.barrier();
}

BenchResult run_ddp(const BenchConfig& c, const std::string& self_exe) {
  char dir_template[] = "/tmp/dpe_bench_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  DPE_CHECK(dir != nullptr, "bench: cannot create a temporary directory");
  const std::string result_path = std::string(dir) + "/rank0.json";
  const std::string batch = std::to_string(c.global_batch);
  const std::string warmup = std::to_string(c.warmup), steps = std::to_string(c.steps);
  const std::string context = std::to_string(c.context), image = std::to_string(c.image);
  const std::vector<std::pair<std::string, std::string>> flags{
      {"--ddp-worker", result_path},
      {"--models", c.model},
      {"--batch-size", batch},
      {"--warmup", warmup},
      {"--steps", steps},
      {"--data-dir", c.data_dir},
      {"--context", context},
      {"--image-size", image},
      {"--ddp-backends", c.ddp_backend},
      {"--device", c.device},
      {"--threads", std::to_string(c.threads)},
      {"--gradient-as-bucket-view", c.bucket_view ? "true" : "false"},
      {"--overlap", c.overlap},
      {"--zero", c.zero ? "true" : "false"},
      {"--sharding", c.sharding.empty() ? "none" : c.sharding},
      {"--fuse", c.fuse ? "true" : "false"},
      {"--channels-last", c.channels_last ? "true" : "false"},
      {"--activation-checkpointing", c.activation_checkpointing ? "true" : "false"},
      {"--precision", c.precision},
      {"--ddp-comm-hooks", c.comm_hook}};
  std::vector<std::string> argv{self_exe};
  for (const auto& [flag, value] : flags) argv.insert(argv.end(), {flag, value});
  // gloo and nccl: child processes with torchrun's variables (LOCAL_RANK picks the GPU).
  const int failed =
      c.ddp_backend == "mpi" ? run_mpi_ranks(argv, c.devices) : run_local_ranks(argv, c.devices);
  DPE_CHECK(failed == 0, "bench: DDP workers (" << c.ddp_backend << ") failed for " << c.model
                                                << " on " << c.devices << " processes");
  std::ifstream in(result_path);
  DPE_CHECK(in.good(), "bench: rank 0 wrote no result to " << result_path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::remove(result_path.c_str());
  rmdir(dir);
  BenchResult r;
  r.config = c;
  r.step_ms = j["step_ms"].get<double>();
  r.overlap_during_backward = j["overlap_during_backward"].get<bool>();
  r.final_loss = j["final_loss"].get<double>();
  r.bytes_per_step = j["bytes_per_step"].get<double>();
  set_rates(r);
  for (auto& d : j["devices"]) {
    r.devices.push_back({d["device"].get<std::string>(), d["peak_bytes"].get<double>(),
                         d["busy_share"].get<double>()});
  }
  return r;
}

double measure_gemm_gflops(int64_t n, int reps, Device device, DType dtype) {
  DPE_CHECK(reps >= 1, "measure_gemm_gflops: " << reps << " reps (expected at least 1)");
  Runtime& rt = Runtime::get();
  if (device.is_host()) set_host_devices({2, 1, 0});
  Generator g(0);
  Tensor a = randn({n, n}, g).to(device).to(dtype), b = randn({n, n}, g).to(device).to(dtype);
  Tensor c = Tensor::empty({n, n}, dtype, device);
  DeviceContext& ctx = rt.context(device);
  DeviceGuard guard(&ctx);
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto start = Clock::now();
    dispatch(prim::Matmul{a, b, c});
    ctx.synchronize();  // CUDA returns before the product is done
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double fastest = *std::min_element(times.begin(), times.end());
  return 2.0 * static_cast<double>(n) * n * n / fastest / 1e9;
}

}  // namespace dpe::tools
