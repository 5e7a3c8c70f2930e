// dpe sim: "DataParallel or DDP, and how many GPUs?" answered before renting them. Traces one
// training step of a model on host devices (the engine's real schedule, without the arithmetic),
// then replays it on a described cluster for 1, 2, 4, 8 GPUs (and two nodes): step time of
// DataParallel and DDP, speed-ups, per-GPU peak memory, device 0's extra, the limiting phase.
// --strategy adds DDP+ZeRO-1 and FSDP's SHARD_GRAD_OP and FULL_SHARD (--activation-checkpointing:
// each also with checkpointing per block); --largest-gpt answers "the largest GPT that trains on
// this cluster with each of them", priced from GPT shapes without tracing.
// Exit codes (tools/common/exit_codes.h): 0 done, 1 a run failed, 2 bad flags, 3 a --topology file
// that is not nvidia-smi's matrix or is over its size limit.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/by_name.h"
#include "models/gpt.h"
#include "tools/common/bool_flag.h"
#include "tools/common/exit_codes.h"
#include "tools/common/output_file.h"
#include "tools/common/paths.h"
#include "tools/cost_model/cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/sharding.h"
#include "tools/cost_model/sim_plot.h"
#include "tools/cost_model/step_trace.h"
#include "tools/cost_model/topology_file.h"

namespace {

using dpe::sim::dp_global_batch;
using dpe::sim::Prediction;

nlohmann::json to_json(const Prediction& p) {
  nlohmann::json j;
  j["mode"] = p.mode;
  j["gpus"] = p.gpus;
  j["possible"] = p.possible;
  if (!p.possible) {
    j["note"] = p.note;
    return j;
  }
  j["step_ms"] = p.step_ms;
  j["limiting_phase"] = p.limiting;
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [name, ms] : p.phases) phases[name] = ms;
  j["phases_ms"] = phases;
  j["peak_gib"] = p.peak_gib;
  j["out_of_memory"] = p.out_of_memory;
  j["comm_bytes"] = p.comm_bytes_per_gpu;
  if (p.mode == "ddp") j["buckets"] = p.buckets;
  if (!p.memory_gib.empty()) {
    j["collectives"] = p.buckets;
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [name, gib] : p.memory_gib) parts[name] = gib;
    j["memory_gib"] = parts;
  }
  return j;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// parse_options' answer when sim goes on to predict.
constexpr int kRun = -1;

struct Options {
  dpe::sim::StepSpec spec;
  std::string cluster_name = "dgx-a100", framework_name = "pytorch", precision = "fp32";
  std::string topo_file, json_path = "sim.json", svg_path = "sim.svg";
  std::vector<int> gpu_counts{1, 2, 4, 8};
  int nodes = 0;
  std::string loss = "device0";
  // --layers, --d-model, --heads, --vocab (0: the model's own).
  int64_t layers = 0, d_model = 0, heads = 0, vocab = 0;
  // --strategy (empty: DataParallel and DDP only, today's table), --activation-checkpointing,
  // --largest-gpt.
  std::vector<std::string> strategies;
  bool activation_checkpointing = false;
  bool largest_gpt = false;
};

bool is_gpt(const std::string& model) {
  return model == "gpt" || model == "gpt2" || model == "gpt-small";
}

// --model gpt and the GPT flags as the traced model's configuration (StepSpec::gpt); the context
// (--context) is the block size when it is longer than the configuration's. False, said on stderr,
// for a GPT flag on another model or heads that do not divide the width.
bool gpt_config_from_flags(Options& o) {
  dpe::sim::StepSpec& spec = o.spec;
  const bool resized = o.layers > 0 || o.d_model > 0 || o.heads > 0 || o.vocab > 0;
  if (!is_gpt(spec.model)) {
    if (resized) {
      std::fprintf(stderr, "sim: --layers, --d-model, --heads and --vocab size a GPT (--model gpt, "
                           "gpt2 or gpt-small), not %s\n", spec.model.c_str());
      return false;
    }
    return true;
  }
  const bool custom = spec.model == "gpt";
  if (custom) spec.model = "gpt2";  // the registered GPT the trace's data and loss are for
  const dpe::models::GptConfig named = dpe::models::gpt_config(spec.model);
  dpe::models::GptConfig c = named;
  if (custom) c.name = "gpt";
  if (o.layers > 0) c.n_layer = o.layers;
  if (o.d_model > 0) c.n_embd = o.d_model;
  if (o.heads > 0) c.n_head = o.heads;
  if (o.vocab > 0) c.vocab_size = o.vocab;
  if (c.n_embd % c.n_head != 0) {
    std::fprintf(stderr, "sim: --heads %lld does not divide --d-model %lld\n",
                 static_cast<long long>(c.n_head), static_cast<long long>(c.n_embd));
    return false;
  }
  c.block_size = custom ? spec.seq : std::max(c.block_size, spec.seq);
  if (custom || resized || c.block_size > named.block_size) spec.gpt = c;
  return true;
}

// The model and the step: what is traced, and DDP's buckets.
void add_step_flags(CLI::App& app, Options& o) {
  dpe::sim::StepSpec& spec = o.spec;
  app.add_option("--model", spec.model, "model")
      ->check(
          CLI::IsMember({"toy", "mlp", "convnet", "resnet50", "resnet101", "resnet-tiny",
                         "gpt-small", "gpt2", "gpt"}))
      ->capture_default_str();
  // The older spellings (--batch, --gpu0-batch, --seq, --image) keep working.
  app.add_option("--batch-size,--batch", spec.batch_per_device,
                 "batch size PER GPU: sequences or images on each GPU, for DataParallel and DDP "
                 "alike (the global batch grows with the GPU count)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--gpu0-batch-size,--gpu0-batch", spec.gpu0_batch,
                 "DataParallel: device 0's batch, the other GPUs keeping --batch-size each "
                 "(Balanced-DataParallel's gpu0_bsz; default: --batch-size on every GPU)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--context,--seq", spec.seq, "language models: tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--layers", o.layers,
                 "GPT: transformer blocks (--model gpt: a GPT of any size, gpt2's unless set; on "
                 "gpt2 and gpt-small: resizes them)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--d-model", o.d_model, "GPT: embedding width (n_embd)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--heads", o.heads, "GPT: attention heads (must divide --d-model)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--vocab", o.vocab, "GPT: vocabulary size")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--image-size,--image", spec.image, "resnet: image height and width")
      ->check(CLI::Range(int64_t{32}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--loss", o.loss,
                 "DataParallel's loss: device0 (PyTorch's default: outputs gathered, loss on "
                 "device 0) or replicas (parallel_criterion, or a model that returns its loss)")
      ->check(CLI::IsMember({"device0", "replicas"}))
      ->capture_default_str();
  dpe::tools::add_switch(
      app, "--gather-outputs", spec.gather_outputs,
      "with --loss replicas: the outputs are gathered too (Hugging Face's Trainer)");
  app.add_option("--optimizer", spec.optimizer, "adamw or sgd (default: adamw for gpt, else sgd)")
      ->check(CLI::IsMember({"", "adamw", "sgd"}));
  app.add_option("--bucket-cap-mb", spec.bucket_cap_mb,
                 "DDP: gradient bucket size in MiB (PyTorch's bucket_cap_mb)")
      ->check(CLI::Range(1.0 / 1024, 65536.0))
      ->capture_default_str();
  app.add_option("--first-bucket-mb", spec.first_bucket_mb,
                 "DDP: the first bucket's size in MiB (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES)")
      ->check(CLI::Range(1.0 / 1024, 65536.0))
      ->capture_default_str();
}

// The cluster the step is replayed on.
void add_cluster_flags(CLI::App& app, Options& o) {
  app.add_option("--cluster", o.cluster_name, "preset")
      ->check(CLI::IsMember(dpe::sim::cluster_preset_names()))
      ->capture_default_str();
  app.add_option("--topology", o.topo_file,
                 "a file with `nvidia-smi topo -m` output: replaces the preset's node (its GPU "
                 "type and network stay)");
  app.add_option("--gpus", o.gpu_counts,
                 "GPU counts, a row each, e.g. 1,2,4,8 (beyond one node: DDP only)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--nodes", o.nodes, "nodes (default: enough for the largest --gpus)")
      ->check(CLI::Range(1, 128));
  app.add_option("--precision", o.precision,
                 "fp32, bf16 or fp16, as bench's and train's: the precision the products compute "
                 "in, bf16 and fp16 mixed precision (tensor cores, 16-bit activations and "
                 "gradients, fp32 master weights and optimizer state; bf16 on Ampere and later); "
                 "or tf32 (fp32 values, TF32 tensor-core products)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "tf32"}))
      ->capture_default_str();
  app.add_option("--framework", o.framework_name, "CPU-side costs: pytorch or dpe")
      ->check(CLI::IsMember({"pytorch", "dpe"}))
      ->capture_default_str();
}

// The sharding strategies, --largest-gpt and where the results go.
void add_report_flags(CLI::App& app, Options& o) {
  app.add_option("--strategy", o.strategies,
                 "also price these, a table of their own after DataParallel's and DDP's: ddp, "
                 "zero1 (DDP + ZeroRedundancyOptimizer), grad-op (FSDP SHARD_GRAD_OP), full-shard "
                 "(FSDP FULL_SHARD); e.g. --strategy ddp,zero1,grad-op,full-shard (dp, "
                 "DataParallel, is always in the first table)")
      ->delimiter(',')
      ->check(CLI::IsMember({"dp", "ddp", "zero1", "grad-op", "full-shard"}));
  dpe::tools::add_switch(
      app, "--activation-checkpointing", o.activation_checkpointing,
      "GPT: each --strategy row again with activation checkpointing per transformer "
      "block (non-reentrant); alone it means --strategy ddp");
  dpe::tools::add_switch(
      app, "--largest-gpt", o.largest_gpt,
      "the largest GPT of the GPT-2/GPT-3 ladder that trains on the largest --gpus count "
      "with each strategy (--strategy, default all four), with and without activation "
      "checkpointing, at --batch-size x --context tokens per GPU; priced from the shapes "
      "(nothing traced)");
  app.add_option("--json", o.json_path,
                 "where to write the results (checked before the run: a path that cannot be "
                 "written exits 2)")
      ->capture_default_str();
  app.add_option("--svg", o.svg_path, "where to draw the plot (checked as --json)")
      ->capture_default_str();
}

// What the flags mean together, once parsed: kRun, or kExitUsage (said on stderr).
int settle_options(Options& o) {
  dpe::sim::StepSpec& spec = o.spec;
  spec.loss_on_replicas = o.loss == "replicas";
  if (!gpt_config_from_flags(o)) return dpe::tools::kExitUsage;
  // DataParallel is the first table's, named or not.
  o.strategies.erase(std::remove(o.strategies.begin(), o.strategies.end(), "dp"),
                     o.strategies.end());
  if (o.activation_checkpointing && !o.largest_gpt && !is_gpt(spec.model)) {
    std::fprintf(stderr, "sim: --activation-checkpointing checkpoints transformer blocks: a GPT "
                         "(--model gpt, gpt2 or gpt-small), not %s\n", spec.model.c_str());
    return dpe::tools::kExitUsage;
  }
  if (o.activation_checkpointing && o.strategies.empty() && !o.largest_gpt) {
    o.strategies = {"ddp"};
  }
  return kRun;
}

// Reads the command line into `o`. Returns kRun, or the exit code when there is nothing to run
// (--help, or a bad flag: CLI11 has printed why).
int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"dpe sim: DataParallel against DDP on GPUs, predicted from the model's ops"};
  add_step_flags(app, o);
  add_cluster_flags(app, o);
  add_report_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  return settle_options(o);
}

// The cluster to replay on: the preset, or its GPU and network with the node of --topology, with
// enough nodes for the largest --gpus unless --nodes says. Empty, said on stderr, when the
// cluster has too few GPUs (a usage error); the topology file's errors are thrown
// (topology_file.h: a UsageError when it cannot be opened, a DataError otherwise).
std::optional<dpe::sim::Cluster> build_cluster(const Options& o) {
  int per_node = dpe::sim::cluster_preset_node_gpus(o.cluster_name);
  const dpe::sim::Cluster probe = dpe::sim::cluster_preset(o.cluster_name, per_node, 1);
  dpe::sim::NodeTopology topology;
  if (!o.topo_file.empty()) {
    topology = dpe::sim::read_topology_file(dpe::tools::user_path(o.topo_file));
    per_node = topology.gpus;
  }
  const int most = *std::max_element(o.gpu_counts.begin(), o.gpu_counts.end());
  const int nodes = o.nodes == 0 ? (most + per_node - 1) / per_node : o.nodes;
  dpe::sim::Cluster cluster =
      o.topo_file.empty() ? dpe::sim::cluster_preset(o.cluster_name, per_node, nodes)
                          : dpe::sim::make_cluster(probe.gpu.name, topology, nodes, probe.network);
  if (most > cluster.total_gpus()) {
    std::fprintf(stderr, "sim: %d GPUs asked, the cluster has %d\n", most, cluster.total_gpus());
    return std::nullopt;
  }
  return cluster;
}

dpe::sim::ReplayOptions replay_options(const Options& o) {
  dpe::sim::ReplayOptions options;
  options.framework = dpe::sim::framework(o.framework_name);
  options.precision = o.precision == "tf32"   ? dpe::sim::Precision::kTf32
                      : o.precision == "fp16" ? dpe::sim::Precision::kFp16
                      : o.precision == "bf16" ? dpe::sim::Precision::kBf16
                                              : dpe::sim::Precision::kFp32;
  return options;
}

// The model as the user asked for it: a GPT's configuration when it is not the named one's.
std::string model_label(const dpe::sim::StepSpec& spec) {
  if (!spec.gpt) return spec.model;
  const dpe::models::GptConfig& c = *spec.gpt;
  const double params = 12.0 * c.n_layer * c.n_embd * c.n_embd +
                        static_cast<double>(c.vocab_size + c.block_size) * c.n_embd;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s (%lld layers, d_model %lld, %lld heads, vocab %lld, context %lld: ~%.0f M "
                "parameters)",
                c.name.c_str(), static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_head), static_cast<long long>(c.vocab_size),
                static_cast<long long>(c.block_size), params / 1e6);
  return buf;
}

void print_setup(const Options& o, const dpe::sim::Cluster& cluster) {
  const dpe::sim::StepSpec& spec = o.spec;
  std::printf("dpe sim: %s, %lld %s per GPU, %s, %s framework costs\n", model_label(spec).c_str(),
              static_cast<long long>(spec.batch_per_device),
              dpe::models::is_language_model(spec.model) ? "sequences" : "images",
              o.precision.c_str(), o.framework_name.c_str());
  if (spec.gpu0_batch >= 0) {
    std::printf("DataParallel: device 0 takes %lld, the others %lld each\n",
                static_cast<long long>(spec.gpu0_batch),
                static_cast<long long>(spec.batch_per_device));
  }
  std::printf("cluster: %s, %d %s of %d x %s (%.0f GiB each)\n", cluster.name.c_str(),
              cluster.nodes, cluster.nodes == 1 ? "node" : "nodes", cluster.topology.gpus,
              cluster.gpu.name.c_str(), cluster.gpu.mem_gib);
}

// After the table: the node's GPU matrix as nvidia-smi prints it, and what NCCL may use of it.
void print_topology(const dpe::sim::Cluster& cluster) {
  std::printf("\nnode topology (nvidia-smi topo -m)%s:\n%s", 
              cluster.p2p ? ""
                          : "; P2P disabled (NCCL_P2P_DISABLE=1): every GPU pair goes through "
                            "host memory, whatever the matrix shows",
              dpe::sim::format_topology(cluster.topology).c_str());
}

std::string optimizer_of(const dpe::sim::StepSpec& spec) {
  if (!spec.optimizer.empty()) return spec.optimizer;
  return dpe::models::is_language_model(spec.model) ? "adamw" : "sgd";
}

// --strategy's strategies (all four when it is empty), each followed by its checkpointed variant
// when `checkpointing`.
std::vector<dpe::sim::StrategyOptions> strategy_options(const Options& o, bool checkpointing) {
  std::vector<std::string> names = o.strategies;
  if (names.empty()) {
    for (dpe::sim::Strategy s : dpe::sim::all_strategies()) names.push_back(strategy_flag(s));
  }
  std::vector<dpe::sim::StrategyOptions> out;
  for (const std::string& name : names) {
    for (const bool ac : {false, true}) {
      if (ac && !checkpointing) continue;
      dpe::sim::StrategyOptions so;
      so.strategy = dpe::sim::strategy_from_flag(name);
      so.activation_checkpointing = ac;
      so.optimizer = optimizer_of(o.spec);
      so.bucket_cap_mb = o.spec.bucket_cap_mb;
      out.push_back(so);
    }
  }
  return out;
}

std::string strategy_row_label(const dpe::sim::StrategyOptions& so) {
  return strategy_label(so.strategy) + (so.activation_checkpointing ? " +AC" : "");
}

// The traced model's GPT configuration (its blocks are FSDP's units and checkpointing's).
std::optional<dpe::models::GptConfig> traced_gpt(const dpe::sim::StepSpec& spec) {
  if (!is_gpt(spec.model)) return std::nullopt;
  if (spec.gpt) return *spec.gpt;
  return dpe::models::gpt_config(spec.model);
}

// One GPU without DataParallel or DDP (PyTorch's "1 GPU, no DDP"), the base of every speed-up,
// and DataParallel's and DDP's predictions, one of each per GPU count; with --strategy, each
// strategy's per GPU count (strategies[count][strategy]).
struct Predictions {
  Prediction base;
  std::vector<Prediction> dp, ddp;
  std::vector<dpe::sim::StrategyOptions> strategy_options;
  std::vector<std::vector<Prediction>> strategies;
};

Predictions predict(const Options& o, const dpe::sim::Cluster& cluster,
                    const dpe::sim::ReplayOptions& options) {
  const dpe::sim::TracedStep ddp_trace = dpe::sim::trace_ddp_step(o.spec);
  Predictions p;
  p.base = dpe::sim::replay_dp(dpe::sim::trace_dp_step(o.spec, 1), cluster, options);
  p.base.mode = "single";
  for (int g : o.gpu_counts) {
    if (g <= cluster.topology.gpus) {
      p.dp.push_back(dpe::sim::replay_dp(dpe::sim::trace_dp_step(o.spec, g), cluster, options));
    } else {
      p.dp.push_back(dpe::sim::dp_across_nodes(g));  // not traced: it cannot run
    }
    p.ddp.push_back(dpe::sim::replay_ddp(ddp_trace, g, cluster, options));
  }
  if (!o.strategies.empty()) {
    p.strategy_options = strategy_options(o, o.activation_checkpointing);
    const dpe::sim::StepProfile profile =
        dpe::sim::traced_profile(ddp_trace, traced_gpt(o.spec), o.spec.batch_per_device,
                                 o.spec.seq, cluster.gpu, options);
    for (int g : o.gpu_counts) {
      const dpe::sim::Collectives nccl(cluster, g);
      std::vector<Prediction> row;
      for (const dpe::sim::StrategyOptions& so : p.strategy_options) {
        row.push_back(dpe::sim::predict_strategy(profile, so, g, cluster, options, nccl));
      }
      p.strategies.push_back(row);
    }
  }
  return p;
}

// Throughput against one GPU without DataParallel or DDP (DataParallel's global batch is uneven
// with --gpu0-batch-size); 0 where DataParallel cannot run.
double dp_speedup(const Options& o, const Predictions& p, size_t i) {
  if (!p.dp[i].possible) return 0;
  const double ms_per_sample = p.base.step_ms / static_cast<double>(o.spec.batch_per_device);
  return dp_global_batch(o.spec, o.gpu_counts[i]) * ms_per_sample / p.dp[i].step_ms;
}
double ddp_speedup(const Options& o, const Predictions& p, size_t i) {
  return o.gpu_counts[i] * p.base.step_ms / p.ddp[i].step_ms;
}

// "12.34 GiB", with " OOM" when it is more than the GPU has.
std::string gib(double v, const dpe::sim::Cluster& cluster) {
  return fmt("%.2f GiB", v) + (v > cluster.gpu.mem_gib ? " OOM" : "");
}

void print_table(const Options& o, const Predictions& p, const dpe::sim::Cluster& cluster,
                 const dpe::sim::ReplayOptions& options) {
  std::printf("%5s %9s %9s %8s %8s %14s %14s %14s  %-12s %-12s\n", "GPUs", "DP ms", "DDP ms",
              "DP x", "DDP x", "DP dev0", "DP others", "DDP each", "DP limit", "DDP limit");
  std::printf("%5s %9.1f %9s %8.2f %8s %14s %14s %14s  %-12s %-12s   (one GPU, no DP/DDP)\n", "1",
              p.base.step_ms, "-", 1.0, "-", gib(p.base.peak_gib[0], cluster).c_str(), "-", "-",
              p.base.limiting.c_str(), "-");
  bool oom = p.base.out_of_memory;
  for (size_t i = 0; i < o.gpu_counts.size(); ++i) {
    const Prediction& a = p.dp[i];
    const Prediction& b = p.ddp[i];
    const int g = o.gpu_counts[i];
    oom = oom || a.out_of_memory || b.out_of_memory;
    std::string others = "-";
    if (a.possible && a.peak_gib.size() > 1) {
      double most = 0;
      for (size_t k = 1; k < a.peak_gib.size(); ++k) most = std::max(most, a.peak_gib[k]);
      others = gib(most, cluster);
    }
    std::printf("%5d %9s %9.1f %8s %8.2f %14s %14s %14s  %-12s %-12s\n", g,
                a.possible ? fmt("%.1f", a.step_ms).c_str() : "-", b.step_ms,
                a.possible ? fmt("%.2f", dp_speedup(o, p, i)).c_str() : "-", ddp_speedup(o, p, i),
                a.possible ? gib(a.peak_gib[0], cluster).c_str() : "-", others.c_str(),
                gib(b.peak_gib[0], cluster).c_str(), a.possible ? a.limiting.c_str() : "-",
                b.limiting.c_str());
  }
  std::printf(
      "(x: throughput against one GPU without DP/DDP; DP others: the largest of GPUs 1..N-1; "
      "memory: the trace's allocator peak + %.1f GiB of CUDA context per GPU)\n",
      options.context_gib);
  if (oom) {
    std::printf("OOM: more than the %s's %.0f GiB: that row does not fit as configured\n",
                cluster.gpu.name.c_str(), cluster.gpu.mem_gib);
  }
}

// The communication a step waits for: all-gathers without prefetch, the collectives that
// outlast backward, ZeRO-1's all-gather after the step.
double exposed_comm_ms(const Prediction& p) {
  double ms = 0;
  for (const auto& [name, v] : p.phases) {
    if (name.find("all_gather") != std::string::npos || name.find("exposed") != std::string::npos) {
      ms += v;
    }
  }
  return ms;
}

void print_strategies(const Options& o, const Predictions& p, const dpe::sim::Cluster& cluster,
                      const dpe::sim::ReplayOptions& options) {
  if (p.strategies.empty()) return;
  std::printf("\nsharding strategies (%s; memory per GPU: ZeRO's model states for %s + "
              "activations + buffers + %.1f GiB of context):\n",
              o.precision == "fp16"   ? "fp16: mixed precision, fp16 parameters and gradients, "
                                        "fp32 master copy"
              : o.precision == "bf16" ? "bf16: mixed precision, bf16 parameters and gradients, "
                                        "fp32 master copy"
                                      : "fp32 parameters, gradients and optimizer state",
              optimizer_of(o.spec).c_str(), options.context_gib);
  std::printf("%5s  %-24s %9s %8s %14s %10s  %-12s\n", "GPUs", "strategy", "step ms", "x",
              "memory/GPU", "comm ms", "limit");
  bool oom = false;
  for (size_t i = 0; i < o.gpu_counts.size(); ++i) {
    for (size_t k = 0; k < p.strategy_options.size(); ++k) {
      const Prediction& r = p.strategies[i][k];
      oom = oom || r.out_of_memory;
      std::printf("%5d  %-24s %9.1f %8.2f %14s %10.1f  %-12s\n", o.gpu_counts[i],
                  strategy_row_label(p.strategy_options[k]).c_str(), r.step_ms,
                  o.gpu_counts[i] * p.base.step_ms / r.step_ms, gib(r.peak_gib[0], cluster).c_str(),
                  exposed_comm_ms(r), r.limiting.c_str());
    }
  }
  std::printf("(x: throughput against one GPU without DP/DDP; comm ms: the collectives the step "
              "waits for; all-gathers without prefetch; +AC: activation checkpointing per "
              "block)\n");
  if (oom) {
    std::printf("OOM: more than the %s's %.0f GiB\n", cluster.gpu.name.c_str(),
                cluster.gpu.mem_gib);
  }
}

// Writes the JSON of the run and its plot, and says where.
void write_outputs(const Options& o, const Predictions& p, const dpe::sim::Cluster& cluster) {
  const dpe::sim::StepSpec& spec = o.spec;
  nlohmann::json j;
  j["model"] = spec.gpt ? spec.gpt->name : spec.model;
  if (spec.gpt) {
    j["gpt"] = {{"layers", spec.gpt->n_layer},
                {"d_model", spec.gpt->n_embd},
                {"heads", spec.gpt->n_head},
                {"vocab", spec.gpt->vocab_size},
                {"block_size", spec.gpt->block_size}};
  }
  j["batch_per_gpu"] = spec.batch_per_device;
  j["gpu0_batch"] = spec.gpu0_batch;
  j["seq"] = spec.seq;
  j["image"] = spec.image;
  j["loss"] = o.loss;
  j["gather_outputs"] = spec.gather_outputs;
  j["bucket_cap_mb"] = spec.bucket_cap_mb;
  j["first_bucket_mb"] = spec.first_bucket_mb;
  j["precision"] = o.precision;
  j["framework"] = o.framework_name;
  j["cluster"] = cluster.name;
  j["gpu"] = cluster.gpu.name;
  j["nodes"] = cluster.nodes;
  j["gpu_mem_gib"] = cluster.gpu.mem_gib;
  j["p2p"] = cluster.p2p;
  j["topology"] = dpe::sim::format_topology(cluster.topology);
  j["single_gpu"] = to_json(p.base);
  for (size_t i = 0; i < o.gpu_counts.size(); ++i) {
    j["runs"].push_back(to_json(p.dp[i]));
    j["runs"].push_back(to_json(p.ddp[i]));
    if (!p.strategies.empty()) {
      for (const Prediction& r : p.strategies[i]) j["strategies"].push_back(to_json(r));
    }
  }
  dpe::tools::write_file_atomically(o.json_path, j.dump(2) + "\n");
  std::vector<dpe::sim::PlotRow> rows;
  for (size_t i = 0; i < o.gpu_counts.size(); ++i) {
    rows.push_back({p.dp[i], p.ddp[i], dp_speedup(o, p, i), ddp_speedup(o, p, i)});
  }
  dpe::sim::write_sim_svg(o.svg_path, model_label(spec) + " on " + cluster.name, rows);
  std::printf("wrote %s and %s\n", o.json_path.c_str(), o.svg_path.c_str());
}

// --largest-gpt: per strategy, the largest rung of the GPT ladder that fits, and how much the next
// one would need; the JSON beside it. Nothing is traced.
void run_largest_gpt(const Options& o, const dpe::sim::Cluster& cluster,
                     const dpe::sim::ReplayOptions& options) {
  const int gpus = *std::max_element(o.gpu_counts.begin(), o.gpu_counts.end());
  const int64_t vocab = o.vocab > 0 ? o.vocab : 50257;
  const int64_t batch = o.spec.batch_per_device, seq = o.spec.seq;
  const std::vector<dpe::sim::StrategyOptions> strategies = strategy_options(o, true);
  std::printf("dpe sim --largest-gpt: %d x %s (%.0f GiB each, %s), %lld x %lld tokens per GPU, "
              "vocab %lld, %s, %s\n",
              gpus, cluster.gpu.name.c_str(), cluster.gpu.mem_gib, cluster.name.c_str(),
              static_cast<long long>(batch), static_cast<long long>(seq),
              static_cast<long long>(vocab), o.precision.c_str(), optimizer_of(o.spec).c_str());
  const std::vector<dpe::sim::LargestGpt> rows =
      dpe::sim::largest_gpt(strategies, batch, seq, vocab, gpus, cluster, options);
  const auto& ladder = dpe::sim::gpt_ladder();
  const dpe::sim::Collectives nccl(cluster, gpus);
  std::printf("%-24s %-12s %8s %6s %7s %11s %9s %10s  %s\n", "strategy", "largest GPT",
              "params", "layers", "d_model", "memory/GPU", "step ms", "tokens/s", "the next one");
  nlohmann::json j;
  j["cluster"] = cluster.name;
  j["gpu"] = cluster.gpu.name;
  j["gpus"] = gpus;
  j["gpu_mem_gib"] = cluster.gpu.mem_gib;
  j["batch_per_gpu"] = batch;
  j["seq"] = seq;
  j["vocab"] = vocab;
  j["precision"] = o.precision;
  j["optimizer"] = optimizer_of(o.spec);
  for (const dpe::sim::LargestGpt& r : rows) {
    nlohmann::json row;
    row["strategy"] = strategy_mode(r.strategy);
    std::string next = "-";
    if (r.rung + 1 < static_cast<int>(ladder.size())) {
      const dpe::sim::GptRung& n = ladder[r.rung + 1];
      const Prediction np = dpe::sim::predict_strategy(
          dpe::sim::gpt_profile(dpe::sim::gpt_rung_config(n, vocab, seq), batch, seq, cluster.gpu,
                                options, r.strategy.optimizer),
          r.strategy, gpus, cluster, options, nccl);
      next = n.name + ": " + fmt("%.1f GiB", np.peak_gib[0]);
      row["next"] = {{"name", n.name}, {"peak_gib", np.peak_gib[0]}};
    }
    if (r.rung < 0) {
      std::printf("%-24s %-12s %8s %6s %7s %11s %9s %10s  %s\n",
                  strategy_row_label(r.strategy).c_str(), "none", "-", "-", "-", "-", "-", "-",
                  next.c_str());
      row["largest"] = nullptr;
    } else {
      const dpe::sim::GptRung& g = ladder[r.rung];
      const Prediction& p = r.prediction;
      std::printf("%-24s %-12s %7.2fB %6lld %7lld %11s %9.1f %10.0f  %s\n",
                  strategy_row_label(r.strategy).c_str(), g.name.c_str(), r.params / 1e9,
                  static_cast<long long>(g.layers), static_cast<long long>(g.d_model),
                  fmt("%.1f GiB", p.peak_gib[0]).c_str(), p.step_ms,
                  gpus * batch * seq / (p.step_ms / 1e3), next.c_str());
      row["largest"] = {{"name", g.name},
                        {"params", r.params},
                        {"layers", g.layers},
                        {"d_model", g.d_model},
                        {"heads", g.heads}};
      row["prediction"] = to_json(p);
    }
    j["rows"].push_back(row);
  }
  std::printf("(the GPT-2/GPT-3 ladder, smallest first: ");
  for (size_t i = 0; i < ladder.size(); ++i) {
    std::printf("%s%s", i ? ", " : "", ladder[i].name.c_str());
  }
  std::printf(";\n parameters 12 L d^2 + 13 L d + (V + context + 2) d, activations per block as "
              "Korthikanti et al. 2022;\n memory: ZeRO's model states + activations + buffers + "
              "%.1f GiB of context; +AC: activation checkpointing per block)\n",
              options.context_gib);
  dpe::tools::write_file_atomically(o.json_path, j.dump(2) + "\n");
  std::printf("wrote %s\n", o.json_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse_options(argc, argv, o); code != kRun) return code;
  try {
    // The outputs first: a path that cannot be written is a usage error before any work.
    o.json_path = dpe::tools::user_path(o.json_path);
    o.svg_path = dpe::tools::user_path(o.svg_path);
    dpe::tools::check_writable("--json", o.json_path);
    dpe::tools::check_writable("--svg", o.svg_path);
    const std::optional<dpe::sim::Cluster> cluster = build_cluster(o);
    if (!cluster) return dpe::tools::kExitUsage;
    if (o.precision == "bf16" && !cluster->gpu.has_bf16()) {
      std::fprintf(stderr, "sim: --precision bf16: %s has no bf16 tensor cores (Ampere and later "
                           "have); use fp16\n", cluster->gpu.name.c_str());
      return dpe::tools::kExitUsage;
    }
    const dpe::sim::ReplayOptions options = replay_options(o);
    if (o.largest_gpt) {
      run_largest_gpt(o, *cluster, options);
      return dpe::tools::kExitOk;
    }
    print_setup(o, *cluster);
    const Predictions p = predict(o, *cluster, options);
    print_table(o, p, *cluster, options);
    print_strategies(o, p, *cluster, options);
    print_topology(*cluster);
    write_outputs(o, p, *cluster);
    return dpe::tools::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sim: %s\n", e.what());
    return dpe::tools::exit_code_for(e);
  }
}
