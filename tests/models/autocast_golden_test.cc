// The Mlp, the tiny GPT and the ConvNet, two SGD steps each under bfloat16 autocast, against
// PyTorch 1.13's torch.autocast("cpu", torch.bfloat16) (golden/make_autocast_golden.py): the
// output's dtype, both losses, the step-1 gradients, the parameters (and running statistics)
// after step 2, each op's dtype from the trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/io/safetensors.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/fusion.h"
#include "engine/optim/sgd.h"
#include "engine/trace/op_trace.h"
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/mlp.h"

namespace dpe::models {
namespace {

// Tolerances: the losses as |dpe - torch| / torch, the gradients and the updates (the change of
// each parameter over both steps, -lr (g1 + g2)) as ||dpe - torch|| / ||torch|| of each tensor.
//
// bfloat16 keeps 8 significant bits: rounding moves a value by up to 2^-9 (0.2%) of itself,
// 2^-9 / sqrt(3) (0.11%) in RMS. Both sides round the same values at the same places (each
// parameter once per forward; each product, bias included, once at its output; the GPT's GELU
// and attention scale once, the golden script writing those out as dpe computes them), and
// products of bfloat16 values are exact in float32, where both accumulate. What is left is the
// order of the float32 sums: their error, ~2^-24 sqrt(k) of their terms, moves the rare output
// that lies that close to a rounding boundary by a whole bfloat16 step (2^-8), and what follows
// from it. Measured here: the Mlp identical bit for bit, the GPT within 1e-7 (losses and
// gradients) and 2.2e-6 (updates); with every sum exact (float64) instead, in PyTorch, the Mlp
// is 1e-7 (loss) and 1.3e-4 (gradients) from PyTorch's own, the GPT 0 and 0 (5e-6 updates). The
// tolerances leave 15-20 times that for other CPUs' summation orders.
// Leaving autocast off (float32 throughout) changes every parameter, activation and gradient
// by a full rounding: the losses by 3.2e-5 (Mlp) and 7.2e-4 (GPT), the gradients by 6.2e-2 and
// 1.8e-2, more than 8 times each tolerance (Float32StepsMissTheTolerances).
constexpr double kMlpLossTol = 2e-6;
constexpr double kGptLossTol = 5e-5;
constexpr double kGradTol = 2e-3;  // gradients and updates, all three models

// The ConvNet. PyTorch runs batch norm, ReLU and max pooling in bfloat16 on the convolutions'
// bfloat16 outputs; dpe reads them in float32 and writes float32 (docs/differences.md). Where the
// two round differently:
//  - forward: PyTorch rounds batch norm's output to bfloat16; dpe rounds the pooled values when
//    the next product (conv2d, the head's linear) casts them. ReLU and max commute with
//    rounding, so the products get the same values up to the order of the float32 sums in the
//    batch statistics (measured: the step-1 losses 9e-8 apart);
//  - batch norm's backward: both compute it in float32 (PyTorch 1.13's bfloat16 batch norm
//    does) and round its input gradient to bfloat16, PyTorch in the kernel, dpe at the cast back
//    to the convolution's output dtype (autograd casts a gradient to its input's dtype);
//  - max pooling's backward: where two values of a window tie once rounded, PyTorch passes the
//    gradient to the first, dpe to the larger float32 value. Rare (at the initial weights 1 of
//    layer1's 12,544 windows and 2 of layer2's 6,272), but each moves a whole gradient value to
//    another pixel: the convolutions' and layer1's batch norm's step-1 gradients 4.5% apart,
//    the updates up to 10%, as far as leaving autocast off is (13-15%), so no tolerance on
//    those could tell dpe's bfloat16 from float32.
// The golden script shows the last is all there is: PyTorch computing dpe's arithmetic but
// pooling with PyTorch's choices matches PyTorch's run to 0 (both losses), 1.3e-6 (gradients)
// and 2.6e-4 (updates; step 2's ties come from its own rounded statistics). So the golden file
// holds two PyTorch runs, and the test checks
//  - PyTorch's own run ("") where no tie enters: the output's dtype, the step-1 loss and the
//    step-1 gradients of the head and of layer2's batch norm (kConvNetTieFree: a tie moves a
//    gradient between two values equal once rounded, which changes batch norm's weight gradient
//    by less than their rounding and its bias gradient, their sum, not at all);
//  - PyTorch computing dpe's arithmetic ("dpe_rounding.", convnet_forward(dpe_rounding=True):
//    batch norm, ReLU and pooling on float32 copies of the convolutions' outputs, nothing else
//    changed) everywhere: both losses, every step-1 gradient, every update and the running
//    statistics' updates.
// The convolutions' biases, right before batch norm, get gradients that are zero but for rounding;
// their differences are measured against their weights' norms (kNormOf).
// Measured (on AMX, fused and unfused alike): against PyTorch's own run, loss 8.7e-8, gradient
// 1.2e-4 (layer2.1.weight); against dpe_rounding, loss 8.7e-8, gradient 2.2e-7, update 1.7e-6
// (and against PyTorch's own everywhere, for the record: loss 1.7e-3, gradient 4.5e-2, update
// 0.10). Float32 steps miss PyTorch's own by 6.3e-4 (loss) and 6.2e-2 (gradient), dpe_rounding
// by 3.3e-3, 0.14 and 0.20. The loss tolerance sits 30 times under float32's step-1 miss and
// 230 times over dpe's; kGradTol is 16 times over dpe's tie-free miss (the other CPUs' sums,
// emulated convolutions off AMX) and 30 times under float32's.
constexpr double kConvNetLossTol = 2e-5;
const std::set<std::string> kConvNetTieFree = {"fc.weight", "fc.bias", "layer2.1.weight",
                                               "layer2.1.bias"};
const std::map<std::string, std::string> kNormOf = {{"layer1.0.bias", "layer1.0.weight"},
                                                    {"layer2.0.bias", "layer2.0.weight"}};

const char kMlpGolden[] = "tests/models/golden/autocast_mlp.safetensors";
const char kGptGolden[] = "tests/models/golden/autocast_gpt.safetensors";
const char kConvNetGolden[] = "tests/models/golden/autocast_convnet.safetensors";

struct Golden {
  std::map<std::string, Tensor> tensors;
  SafetensorsMetadata metadata;
  int64_t stride = 1, stride_above = 0;

  explicit Golden(const std::string& path) {
    SafetensorsContents c = read_safetensors(path);
    for (auto& [name, t] : c.tensors) tensors[name] = t;
    metadata = c.metadata;
    stride = std::stoll(metadata.at("stride"));
    stride_above = std::stoll(metadata.at("stride_above"));
  }
  const Tensor& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::out_of_range("no " + name + " in the golden file");
    return it->second;
  }
  // t's values, every stride-th where the file keeps them so.
  std::vector<float> sampled(const Tensor& t) const {
    std::vector<float> v = t.to_vector<float>();
    if (static_cast<int64_t>(v.size()) <= stride_above) return v;
    std::vector<float> out;
    for (size_t i = 0; i < v.size(); i += static_cast<size_t>(stride)) out.push_back(v[i]);
    return out;
  }
};

double norm(const std::vector<float>& a) {
  double sum = 0;
  for (float x : a) sum += double(x) * x;
  return std::sqrt(sum);
}

// ||a - b|| / ||b|| (or / ref_norm where given), in double.
double rel_error(const std::vector<float>& a, const std::vector<float>& b, double ref_norm = -1) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  }
  return std::sqrt(diff) / std::max(ref_norm < 0 ? norm(b) : ref_norm, 1e-30);
}

std::vector<float> minus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

// make_autocast_golden.py's splitmix_uniform: centre + bound * u / 2^23, u the top 24 bits of
// splitmix64((index << 32) + i) centred, in double and rounded once to float32.
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor splitmix_uniform(uint64_t index, const Shape& shape, double bound, double centre = 0) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t u = static_cast<int64_t>(splitmix64((index << 32) + i) >> 40) - (1 << 23);
    v[i] = static_cast<float>(centre + std::ldexp(static_cast<double>(u), -23) * bound);
  }
  return Tensor::from_vector(v, shape);
}

// make_autocast_golden.py's mlp_weight: in [-1/32, 1/32), exact in float32.
Tensor mlp_weight(uint64_t index, const Shape& shape) {
  return splitmix_uniform(index, shape, 1.0 / 32);
}

using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

struct Steps {
  DType output_dtype = DType::kFloat32;
  std::vector<float> losses;
  std::map<std::string, Tensor> grads;  // of step 1
  std::vector<TraceEvent> trace;        // of step 1's forward, loss and backward
};

// Two SGD steps (the golden's lr, no momentum) of `model` on the golden input, the forward and
// the loss under bfloat16 autocast when `bf16`.
Steps train(Module& model, const Golden& golden, const LossFn& loss_fn, bool bf16) {
  optim::SgdOptions o;
  o.lr = std::stof(golden.metadata.at("lr"));
  optim::SGD sgd(model.parameters(), o);
  Steps run;
  for (int step = 0; step < 2; ++step) {
    sgd.zero_grad();
    auto trace = step == 0 ? std::make_unique<OpTrace>() : nullptr;
    Tensor loss;
    {
      autocast amp(DeviceType::kHost, DType::kBFloat16, bf16);
      const Tensor out = model(golden.at("input"));
      if (step == 0) run.output_dtype = out.dtype();
      loss = loss_fn(out, golden.at("target"));
    }
    backward(loss);
    if (trace) run.trace = trace->stop();
    run.losses.push_back(loss.item());
    if (step == 0) {
      for (auto& [name, p] : model.named_parameters()) run.grads[name] = p.grad().clone();
    }
    sgd.step();
  }
  return run;
}

// The worst of each kind of difference from the golden run.
struct Misses {
  double loss = 0, grad = 0, update = 0;
  bool updates = true;  // compared
  std::string worst_grad = "-", worst_update = "-";
};

// Which golden run compare() reads and how much of it.
struct Against {
  std::string prefix;                // of the run's keys: "" PyTorch's own, "dpe_rounding."
  size_t losses = 2;                 // the first this many
  std::set<std::string> grads_only;  // when not empty: these step-1 gradients, and no updates
  bool buffers = false;              // the running statistics' updates too
};

// `model` after train(), which started from `initial` (its parameters and, with
// against.buffers, its running statistics).
Misses compare(const Module& model, const Steps& run, const Golden& golden,
               const std::map<std::string, Tensor>& initial, const Against& against = {}) {
  Misses m;
  const std::string& pre = against.prefix;
  const std::vector<float> want = golden.at(pre + "loss").to_vector<float>();
  for (size_t i = 0; i < std::min(want.size(), against.losses); ++i) {
    m.loss = std::max(m.loss, std::abs(double(run.losses.at(i)) - want[i]) / want[i]);
  }
  // A kNormOf tensor's difference against its reference tensor's norm.
  auto ref_norm = [&](const std::string& key, const std::string& name) {
    auto it = kNormOf.find(name);
    return it == kNormOf.end() ? -1.0 : norm(golden.at(key + it->second).to_vector<float>());
  };
  for (const auto& [name, p] : model.named_parameters()) {
    if (!against.grads_only.empty() && !against.grads_only.count(name)) continue;
    const double g = rel_error(golden.sampled(run.grads.at(name)),
                               golden.at(pre + "grad1." + name).to_vector<float>(),
                               ref_norm(pre + "grad1.", name));
    if (g > m.grad) m.grad = g, m.worst_grad = name;
  }
  if (!against.grads_only.empty()) {
    m.updates = false;
    return m;
  }
  auto tensors = model.named_parameters();
  if (against.buffers) {
    for (const auto& [name, b] : model.named_buffers()) {
      if (initial.count(name)) tensors.emplace_back(name, b);
    }
  }
  for (const auto& [name, p] : tensors) {
    // The parameters themselves would agree to a fraction of a per cent whatever the
    // arithmetic: their change is what the steps computed.
    const std::vector<float> p0 = golden.sampled(initial.at(name));
    const std::vector<float> want_update =
        minus(golden.at(pre + "step2." + name).to_vector<float>(), p0);
    double ref = -1;
    if (kNormOf.count(name)) {
      const std::string& of = kNormOf.at(name);
      ref = norm(
          minus(golden.at(pre + "step2." + of).to_vector<float>(), golden.sampled(initial.at(of))));
    }
    const double u = rel_error(minus(golden.sampled(p), p0), want_update, ref);
    if (u > m.update) m.update = u, m.worst_update = name;
  }
  return m;
}

void print(const char* what, const Misses& m, const char* run = "PyTorch's bfloat16") {
  std::printf("%s against %s: loss %.3g, gradient %.3g (%s)", what, run, m.loss, m.grad,
              m.worst_grad.c_str());
  if (m.updates) std::printf(", update %.3g (%s)", m.update, m.worst_update.c_str());
  std::printf("\n");
}

// "bfloat16,float32" for a set of dtypes, as the golden's metadata names them.
std::string joined(const std::set<std::string>& names) {
  std::ostringstream out;
  for (const std::string& n : names) out << (out.tellp() > 0 ? "," : "") << n;
  return out.str();
}

// The ConvNet's dpe ops that compute in float32 where the aten ops after their names computed in
// bfloat16: batch norm (fused or not, with what it fuses) and pooling, and the ReLU between
// them, whose input is batch norm's float32 output in dpe.
const std::map<std::string, std::vector<std::string>> kWidened = {
    {"batch_norm", {"native_batch_norm"}},
    {"batch_norm_relu", {"native_batch_norm", "relu"}},
    {"batch_norm_relu_max_pool2d", {"native_batch_norm", "relu", "max_pool2d_with_indices"}},
    {"relu", {"relu"}},
    {"max_pool2d", {"max_pool2d_with_indices"}},
};

// The dtypes each dpe op of the forward and the loss computed in, by op name (the casts left
// out), checked against what PyTorch's aten ops did (metadata "dtype.<aten op>"): each dpe op
// of the list against the aten ops that compute it in PyTorch's forward, and the ops of
// `widened` as float32 against bfloat16.
void expect_op_dtypes_match(const std::vector<TraceEvent>& events, const Golden& golden,
                            const std::map<std::string, std::vector<std::string>>& widened = {}) {
  std::map<std::string, std::set<std::string>> ran;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceKind::kOp && !e.backward && e.name != "to") {
      ran[e.name].insert(dtype_name(e.dtype));
    }
  }
  const std::map<std::string, std::vector<std::string>> aten = {
      {"linear", {"addmm", "mm"}},  // F.linear and Conv1D are addmm, the tied LM head mm
      {"conv2d", {"convolution"}},
      {"bmm", {"bmm"}},
      {"relu", {"relu"}},
      {"add", {"add"}},
      {"layer_norm", {"native_layer_norm"}},
      {"softmax", {"_softmax"}},
      {"cross_entropy", {"_log_softmax", "nll_loss_forward"}},
      {"embedding", {"index"}},
  };
  std::set<std::string> seen;
  for (const auto& [op, dtypes] : ran) {
    if (auto w = widened.find(op); w != widened.end()) {
      EXPECT_EQ(joined(dtypes), "float32") << "dpe's " << op;
      for (const std::string& a : w->second) {
        seen.insert(a);
        EXPECT_EQ(golden.metadata.at("dtype." + a), "bfloat16") << "PyTorch's " << a;
      }
      continue;
    }
    auto it = aten.find(op);
    if (it == aten.end()) continue;
    for (const std::string& a : it->second) {
      auto m = golden.metadata.find("dtype." + a);
      if (m == golden.metadata.end()) continue;
      seen.insert(a);
      EXPECT_EQ(joined(dtypes), m->second) << "dpe's " << op << " against PyTorch's " << a;
    }
  }
  for (const auto& [key, value] : golden.metadata) {
    if (key.rfind("dtype.", 0) == 0) {
      EXPECT_TRUE(seen.count(key.substr(6))) << key << " has no dpe op";
    }
  }
  if (widened.empty()) {
    // The golden writes these two out in float32 with one rounding, as dpe's 16-bit kernels are.
    // (The ConvNet's scale ops are batch norm's running statistics, float32 as PyTorch's.)
    for (const char* op : {"gelu", "scale"}) {
      if (ran.count(op)) {
        EXPECT_EQ(joined(ran.at(op)), "bfloat16") << op;
      }
    }
  }
}

Tensor mlp_loss(const Tensor& logits, const Tensor& target) {
  return ops::cross_entropy(logits, target);
}

Tensor gpt_loss(const Tensor& logits, const Tensor& target) { return lm_loss(logits, target); }

Tensor convnet_loss(const Tensor& logits, const Tensor& target) {
  return ops::cross_entropy(logits, target);
}

// Sets the Mlp's parameters to make_autocast_golden.py's and returns them.
std::map<std::string, Tensor> mlp_initial(Mlp& model) {
  std::map<std::string, Tensor> w;
  uint64_t index = 0;
  for (auto& [name, p] : model.named_parameters()) {
    w[name] = mlp_weight(index++, p.shape());
    p.copy_(w[name]);
  }
  return w;
}

GptConfig tiny() {  // make_gpt_golden.py's configuration
  GptConfig c;
  c.name = "tiny";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 97;
  return c;
}

// Loads the golden's GPT weights (GPT-2's names) into `model` and returns them.
std::map<std::string, Tensor> gpt_initial(Gpt& model, const Golden& golden) {
  StateDict weights;
  std::map<std::string, Tensor> w;
  for (const auto& [name, p] : model.named_parameters()) {
    weights.emplace_back(name, golden.at(name).clone());
    w[name] = golden.at(name).clone();
  }
  model.load_state_dict(weights);
  return w;
}

// make_autocast_golden.py's convnet_params: the bound (and centre) of each parameter, in order.
struct Init {
  const char* name;
  double bound, centre;
};
const Init kConvNetInit[] = {
    {"layer1.0.weight", 1 / std::sqrt(25.0), 0},
    {"layer1.0.bias", 1 / std::sqrt(25.0), 0},
    {"layer1.1.weight", 1.0 / 8, 1},
    {"layer1.1.bias", 1.0 / 8, 0},
    {"layer2.0.weight", 1 / std::sqrt(400.0), 0},
    {"layer2.0.bias", 1 / std::sqrt(400.0), 0},
    {"layer2.1.weight", 1.0 / 8, 1},
    {"layer2.1.bias", 1.0 / 8, 0},
    {"fc.weight", 1 / std::sqrt(1568.0), 0},
    {"fc.bias", 1 / std::sqrt(1568.0), 0},
};

// Sets the ConvNet's parameters to make_autocast_golden.py's and returns them with the running
// statistics (as new: 0 and 1 on both sides).
std::map<std::string, Tensor> convnet_initial(ConvNet& model, const Golden& golden) {
  std::map<std::string, Tensor> w;
  const auto params = model.named_parameters();
  EXPECT_EQ(params.size(), std::size(kConvNetInit));
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].first;
    Tensor p = params[i].second;
    EXPECT_EQ(name, kConvNetInit[i].name);
    w[name] = splitmix_uniform(i, p.shape(), kConvNetInit[i].bound, kConvNetInit[i].centre);
    p.copy_(w[name]);
  }
  for (const auto& [name, b] : model.named_buffers()) {
    if (golden.tensors.count("step2." + name)) w[name] = b.clone();
  }
  for (const char* block : {"layer1", "layer2"}) {
    const auto& bn = dynamic_cast<const nn::BatchNorm2d&>(model.child(block).child("1"));
    EXPECT_EQ(bn.eps(), std::stof(golden.metadata.at("bn_eps")));
    EXPECT_EQ(bn.momentum(), std::stof(golden.metadata.at("bn_momentum")));
  }
  return w;
}

TEST(AutocastGoldenTest, MlpMatchesPyTorch) {
  const Golden golden(kMlpGolden);
  Generator gen(0);
  Mlp model(gen);
  const auto initial = mlp_initial(model);
  const Steps run = train(model, golden, mlp_loss, true);
  EXPECT_EQ(dtype_name(run.output_dtype), golden.metadata.at("output_dtype"));
  const Misses m = compare(model, run, golden, initial);
  print("mlp, bfloat16", m);
  EXPECT_LT(m.loss, kMlpLossTol);
  EXPECT_LT(m.grad, kGradTol) << m.worst_grad;
  EXPECT_LT(m.update, kGradTol) << m.worst_update;
  expect_op_dtypes_match(run.trace, golden);
}

TEST(AutocastGoldenTest, GptMatchesPyTorch) {
  const Golden golden(kGptGolden);
  Generator gen(0);
  Gpt model(tiny(), gen);
  const auto initial = gpt_initial(model, golden);
  const Steps run = train(model, golden, gpt_loss, true);
  EXPECT_EQ(dtype_name(run.output_dtype), golden.metadata.at("output_dtype"));
  const Misses m = compare(model, run, golden, initial);
  print("gpt, bfloat16", m);
  EXPECT_LT(m.loss, kGptLossTol);
  EXPECT_LT(m.grad, kGradTol) << m.worst_grad;
  EXPECT_LT(m.update, kGradTol) << m.worst_update;
  expect_op_dtypes_match(run.trace, golden);
}

// Fused (dpe's default in training: batch norm, ReLU and pooling as one op) and unfused.
class ConvNetAutocastTest : public ::testing::TestWithParam<bool> {};

TEST_P(ConvNetAutocastTest, MatchesPyTorch) {
  const nn::FusionScope fusion(GetParam());
  const Golden golden(kConvNetGolden);
  Generator gen(0);
  ConvNet model(gen);
  const auto initial = convnet_initial(model, golden);
  const Steps run = train(model, golden, convnet_loss, true);
  EXPECT_EQ(dtype_name(run.output_dtype), golden.metadata.at("output_dtype"));
  const Misses own = compare(model, run, golden, initial, {"", 1, kConvNetTieFree});
  print("convnet, bfloat16, step 1 where no tie enters", own);
  EXPECT_LT(own.loss, kConvNetLossTol);
  EXPECT_LT(own.grad, kGradTol) << own.worst_grad;
  const Misses all = compare(model, run, golden, initial, {"dpe_rounding.", 2, {}, true});
  print("convnet, bfloat16", all, "PyTorch's bfloat16 with dpe's rounding");
  EXPECT_LT(all.loss, kConvNetLossTol);
  EXPECT_LT(all.grad, kGradTol) << all.worst_grad;
  EXPECT_LT(all.update, kGradTol) << all.worst_update;
  // For the record, PyTorch's own run everywhere (ties in the pooling: see kConvNetLossTol).
  print("convnet, bfloat16", compare(model, run, golden, initial, {"", 2, {}, true}));
  expect_op_dtypes_match(run.trace, golden, kWidened);
  bool fused = false;
  for (const TraceEvent& e : run.trace) fused |= e.name == "batch_norm_relu_max_pool2d";
  EXPECT_EQ(fused, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fusion, ConvNetAutocastTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fused" : "Unfused"; });

// The fused and unfused ConvNet under autocast: the same steps bit for bit (engine/nn/fusion.h's
// design note, here with batch norm reading bfloat16).
TEST(AutocastGoldenTest, ConvNetFusedIsUnfusedBitForBit) {
  const Golden golden(kConvNetGolden);
  std::vector<Steps> runs;
  std::vector<StateDict> states;
  for (bool fuse : {true, false}) {
    const nn::FusionScope fusion(fuse);
    Generator gen(0);
    ConvNet model(gen);
    convnet_initial(model, golden);
    runs.push_back(train(model, golden, convnet_loss, true));
    states.push_back(model.state_dict());
  }
  EXPECT_EQ(runs[0].losses, runs[1].losses);
  for (const auto& [name, g] : runs[0].grads) {
    EXPECT_EQ(g.to_vector<float>(), runs[1].grads.at(name).to_vector<float>()) << name;
  }
  ASSERT_EQ(states[0].size(), states[1].size());
  for (size_t i = 0; i < states[0].size(); ++i) {
    const Tensor& a = states[0][i].second;
    if (a.dtype() != DType::kFloat32) continue;  // num_batches_tracked
    EXPECT_EQ(a.to_vector<float>(), states[1][i].second.to_vector<float>()) << states[0][i].first;
  }
}

// The tolerances would catch autocast doing nothing: float32 steps miss each of them.
TEST(AutocastGoldenTest, Float32StepsMissTheTolerances) {
  {
    const Golden golden(kMlpGolden);
    Generator gen(0);
    Mlp model(gen);
    const auto initial = mlp_initial(model);
    const Misses m = compare(model, train(model, golden, mlp_loss, false), golden, initial);
    print("mlp, float32", m);
    EXPECT_GT(m.loss, kMlpLossTol);
    EXPECT_GT(m.grad, kGradTol);
    EXPECT_GT(m.update, kGradTol);
  }
  {
    const Golden golden(kGptGolden);
    Generator gen(0);
    Gpt model(tiny(), gen);
    const auto initial = gpt_initial(model, golden);
    const Misses m = compare(model, train(model, golden, gpt_loss, false), golden, initial);
    print("gpt, float32", m);
    EXPECT_GT(m.loss, kGptLossTol);
    EXPECT_GT(m.grad, kGradTol);
    EXPECT_GT(m.update, kGradTol);
  }
  {
    const Golden golden(kConvNetGolden);
    Generator gen(0);
    ConvNet model(gen);
    const auto initial = convnet_initial(model, golden);
    const Steps run = train(model, golden, convnet_loss, false);
    const Misses own = compare(model, run, golden, initial, {"", 1, kConvNetTieFree});
    print("convnet, float32, step 1 where no tie enters", own);
    EXPECT_GT(own.loss, kConvNetLossTol);
    EXPECT_GT(own.grad, kGradTol);
    const Misses all = compare(model, run, golden, initial, {"dpe_rounding.", 2, {}, true});
    print("convnet, float32", all, "PyTorch's bfloat16 with dpe's rounding");
    EXPECT_GT(all.loss, kConvNetLossTol);
    EXPECT_GT(all.grad, kGradTol);
    EXPECT_GT(all.update, kGradTol);
    print("convnet, float32", compare(model, run, golden, initial, {"", 2, {}, true}));
  }
}

}  // namespace
}  // namespace dpe::models
