// The Mlp and the tiny GPT, two SGD steps each under bfloat16 autocast, against PyTorch 1.13's
// torch.autocast("cpu", torch.bfloat16) (golden/make_autocast_golden.py): the output's dtype,
// both losses, the step-1 gradients, the parameters after step 2, each op's dtype from the trace.
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
#include "engine/optim/sgd.h"
#include "engine/trace/op_trace.h"
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
constexpr double kGradTol = 2e-3;  // gradients and updates, both models

const char kMlpGolden[] = "tests/models/golden/autocast_mlp.safetensors";
const char kGptGolden[] = "tests/models/golden/autocast_gpt.safetensors";

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

// ||a - b|| / ||b||, in double.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

std::vector<float> minus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

// make_autocast_golden.py's mlp_weight: the top 24 bits of splitmix64((index << 32) + i),
// centred and scaled into [-1/32, 1/32), exact in float32.
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor mlp_weight(uint64_t index, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t u = static_cast<int64_t>(splitmix64((index << 32) + i) >> 40) - (1 << 23);
    v[i] = static_cast<float>(std::ldexp(static_cast<double>(u), -28));
  }
  return Tensor::from_vector(v, shape);
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
  std::string worst_grad = "-", worst_update = "-";
};

// `model` after train(), which started from `initial`.
Misses compare(const Module& model, const Steps& run, const Golden& golden,
               const std::map<std::string, Tensor>& initial) {
  Misses m;
  const std::vector<float> want = golden.at("loss").to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    m.loss = std::max(m.loss, std::abs(double(run.losses.at(i)) - want[i]) / want[i]);
  }
  for (const auto& [name, p] : model.named_parameters()) {
    const std::vector<float> p0 = golden.sampled(initial.at(name));
    const double g = rel_error(golden.sampled(run.grads.at(name)),
                               golden.at("grad1." + name).to_vector<float>());
    // The parameters themselves would agree to a fraction of a per cent whatever the
    // arithmetic: their change is what the steps computed.
    const double u = rel_error(minus(golden.sampled(p), p0),
                               minus(golden.at("step2." + name).to_vector<float>(), p0));
    if (g > m.grad) m.grad = g, m.worst_grad = name;
    if (u > m.update) m.update = u, m.worst_update = name;
  }
  return m;
}

void print(const char* what, const Misses& m) {
  std::printf("%s against PyTorch's bfloat16: loss %.3g, gradient %.3g (%s), update %.3g (%s)\n",
              what, m.loss, m.grad, m.worst_grad.c_str(), m.update, m.worst_update.c_str());
}

// "bfloat16,float32" for a set of dtypes, as the golden's metadata names them.
std::string joined(const std::set<std::string>& names) {
  std::ostringstream out;
  for (const std::string& n : names) out << (out.tellp() > 0 ? "," : "") << n;
  return out.str();
}

// The dtypes each dpe op of the forward and the loss computed in, by op name (the casts left
// out), checked against what PyTorch's aten ops did (metadata "dtype.<aten op>"): each dpe op
// of the list against the aten ops that compute it in PyTorch's forward.
void expect_op_dtypes_match(const std::vector<TraceEvent>& events, const Golden& golden) {
  std::map<std::string, std::set<std::string>> ran;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceKind::kOp && !e.backward && e.name != "to") {
      ran[e.name].insert(dtype_name(e.dtype));
    }
  }
  const std::map<std::string, std::vector<std::string>> aten = {
      {"linear", {"addmm", "mm"}},  // F.linear and Conv1D are addmm, the tied LM head mm
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
  // The golden writes these two out in float32 with one rounding, as dpe's 16-bit kernels are.
  for (const char* op : {"gelu", "scale"}) {
    if (ran.count(op)) {
      EXPECT_EQ(joined(ran.at(op)), "bfloat16") << op;
    }
  }
}

Tensor mlp_loss(const Tensor& logits, const Tensor& target) {
  return ops::cross_entropy(logits, target);
}

Tensor gpt_loss(const Tensor& logits, const Tensor& target) { return lm_loss(logits, target); }

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
}

}  // namespace
}  // namespace dpe::models
