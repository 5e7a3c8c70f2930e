#include "models/gpt.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/activation.h"
#include "engine/nn/dropout.h"
#include "engine/nn/embedding.h"
#include "engine/nn/layer_norm.h"
#include "engine/nn/sequential.h"
#include "models/registry.h"

namespace dpe::models {
namespace {

Tensor normal(const Shape& shape, float stddev, Generator& gen) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = gen.normal(0.0f, stddev);
  return Tensor::from_vector(v, shape);
}

// Seeds for the attention-probability dropout, shared by a module and its replicas (as nn::Dropout
// shares its generator), so every forward on any replica draws a fresh mask. Drawn through
// draw_seed so that a checkpoint's recompute draws the same mask (random.h, "seed replay").
class SeedSource {
 public:
  explicit SeedSource(uint64_t seed) { gen_.manual_seed(seed); }
  uint64_t next() {
    return draw_seed([this] {
      std::lock_guard<std::mutex> lock(mu_);
      return gen_.next_u64();
    });
  }

 private:
  std::mutex mu_;
  Generator gen_;
};

// GPT-2's Conv1D: y = x W + b with W [in, out] (a Linear with the weight stored transposed).
class Conv1D : public Cloneable<Conv1D> {
 public:
  Conv1D(int64_t in, int64_t out, float stddev, Generator& gen) : in_(in), out_(out) {
    register_parameter("weight", normal({in, out}, stddev, gen));
    register_parameter("bias", Tensor::zeros({out}));
  }
  // x [..., in] -> [..., out]
  Tensor forward(const Tensor& x) override {
    DPE_CHECK(x.dim() >= 1 && x.size(-1) == in_,
              repr() << ": expected input [..., " << in_ << "], got " << x.shape());
    std::vector<int64_t> out_dims(x.shape().begin(), x.shape().end());
    out_dims.back() = out_;
    const Tensor x2 = ops::reshape(x, Shape{x.numel() / in_, in_});
    const Tensor w = ops::permute(param("weight"), {1, 0});  // [out, in], as ops::linear takes it
    return ops::reshape(ops::linear(x2, w, param("bias"), repr()), Shape(out_dims));
  }
  std::string repr() const override {
    return "Conv1D(nf=" + std::to_string(out_) + ", nx=" + std::to_string(in_) + ")";
  }

 private:
  int64_t in_, out_;
};

class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  CausalSelfAttention(const GptConfig& c, Generator& gen)
      : n_head_(c.n_head), n_embd_(c.n_embd), dropout_(c.dropout) {
    register_module("c_attn", std::make_shared<Conv1D>(c.n_embd, 3 * c.n_embd, 0.02f, gen));
    register_module("c_proj", std::make_shared<Conv1D>(
                                  c.n_embd, c.n_embd, 0.02f / std::sqrt(2.0f * c.n_layer), gen));
    register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout, gen.next_u64()));
    seeds_ = std::make_shared<SeedSource>(gen.next_u64());
  }
  // x [B, T, D] -> [B, T, D]
  Tensor forward(const Tensor& x) override {
    const int64_t B = x.size(0), T = x.size(1), D = n_embd_, H = n_head_, hd = D / H;
    const Tensor qkv = child("c_attn").forward(x);  // [B, T, 3D]
    // [3, B, H, T, hd] as a view; q, k and v are its slices along dim 0, so each slice's backward
    // fills a contiguous block rather than a strided third of the last dim.
    const Tensor all = ops::permute(ops::reshape(qkv, Shape{B, T, 3, H, hd}), {2, 0, 3, 1, 4});
    auto heads = [&](int64_t i) {  // the i-th of q, k, v as [B, H, T, hd]
      return ops::reshape(ops::narrow(all, 0, i, 1), Shape{B, H, T, hd});
    };
    const bool drop = is_training() && dropout_ > 0.0f;
    const Tensor y = ops::scaled_dot_product_attention(heads(0), heads(1), heads(2),
                                                       /*causal=*/true, drop ? dropout_ : 0.0f,
                                                       drop ? seeds_->next() : 0);
    const Tensor merged = ops::reshape(ops::permute(y, {0, 2, 1, 3}), Shape{B, T, D});
    return child("resid_dropout").forward(child("c_proj").forward(merged));
  }
  std::string repr() const override { return "GPT2Attention"; }

 private:
  int64_t n_head_, n_embd_;
  float dropout_;
  std::shared_ptr<SeedSource> seeds_;
};

class Mlp : public Cloneable<Mlp> {
 public:
  Mlp(const GptConfig& c, Generator& gen) {
    register_module("c_fc", std::make_shared<Conv1D>(c.n_embd, 4 * c.n_embd, 0.02f, gen));
    register_module("c_proj", std::make_shared<Conv1D>(
                                  4 * c.n_embd, c.n_embd, 0.02f / std::sqrt(2.0f * c.n_layer), gen));
    register_module("act", std::make_shared<nn::GELU>());
    register_module("dropout", std::make_shared<nn::Dropout>(c.dropout, gen.next_u64()));
  }
  Tensor forward(const Tensor& x) override {
    return child("dropout").forward(
        child("c_proj").forward(child("act").forward(child("c_fc").forward(x))));
  }
  std::string repr() const override { return "GPT2MLP"; }
};

class Block : public Cloneable<Block> {
 public:
  Block(const GptConfig& c, Generator& gen) {
    register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
    register_module("attn", std::make_shared<CausalSelfAttention>(c, gen));
    register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
    register_module("mlp", std::make_shared<Mlp>(c, gen));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor a = ops::add(x, child("attn").forward(child("ln_1").forward(x)));
    return ops::add(a, child("mlp").forward(child("ln_2").forward(a)));
  }
  std::string repr() const override { return "GPT2Block"; }
};

}  // namespace

bool is_gpt_block(const Module& m) { return dynamic_cast<const Block*>(&m) != nullptr; }

GptConfig gpt_config(const std::string& name) {
  GptConfig c;
  c.name = name;
  if (name == "gpt2") {
    c.dropout = 0.1f;
    return c;
  }
  if (name == "gpt-small") {
    c.n_layer = 4;
    c.n_head = 4;
    c.n_embd = 256;
    c.block_size = 128;
    c.vocab_size = 32000;
    return c;
  }
  DPE_THROW("unknown gpt configuration '" << name << "' (expected gpt2 or gpt-small)");
}

Gpt::Gpt(const GptConfig& c, Generator& gen) : config_(c) {
  DPE_CHECK(c.n_layer > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0 && c.block_size > 0 &&
                c.vocab_size > 0,
            "Gpt: bad configuration " << c.name << " (n_embd " << c.n_embd
                                      << " must be a multiple of n_head " << c.n_head << ")");
  register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, gen));
  register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd, gen));
  // OpenAI's gpt-2 code: wte N(0, 0.02), wpe N(0, 0.01).
  find("wte.weight").copy_(normal({c.vocab_size, c.n_embd}, 0.02f, gen));
  find("wpe.weight").copy_(normal({c.block_size, c.n_embd}, 0.01f, gen));
  register_module("drop", std::make_shared<nn::Dropout>(c.dropout, gen.next_u64()));
  auto h = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c, gen));
  register_module("h", h);
  register_module("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
}

Tensor Gpt::forward(const Tensor& tokens) {
  DPE_CHECK(tokens.dtype() == DType::kInt64 && tokens.dim() == 2,
            "Gpt: expected int64 token ids [B, T], got " << dtype_name(tokens.dtype()) << " "
                                                         << tokens.shape());
  const int64_t B = tokens.size(0), T = tokens.size(1), D = config_.n_embd;
  DPE_CHECK(T <= config_.block_size, "Gpt: sequence length " << T << " exceeds the context of "
                                                              << config_.block_size);
  std::vector<int64_t> positions(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) positions[i] = i % T;
  const Tensor pos = Tensor::from_vector(positions, tokens.shape(), tokens.device());
  const Tensor wte = find("wte.weight");
  Tensor x = ops::add(ops::embedding(wte, tokens), ops::embedding(find("wpe.weight"), pos));
  x = child("ln_f").forward(child("h").forward(child("drop").forward(x)));  // [B, T, D]
  const Tensor logits = ops::linear(ops::reshape(x, Shape{B * T, D}), wte, Tensor(), "lm_head");
  return ops::reshape(logits, Shape{B, T, config_.vocab_size});
}

std::string Gpt::repr() const {
  return "GPT2LMHeadModel(" + config_.name + ": n_layer=" + std::to_string(config_.n_layer) +
         ", n_head=" + std::to_string(config_.n_head) + ", n_embd=" +
         std::to_string(config_.n_embd) + ", n_ctx=" + std::to_string(config_.block_size) +
         ", vocab_size=" + std::to_string(config_.vocab_size) + ")";
}

int64_t Gpt::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  DPE_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                logits.size(1) == targets.size(1),
            "lm_loss: expected logits [B, T, V] and targets [B, T], got " << logits.shape()
                                                                           << " and "
                                                                           << targets.shape());
  const int64_t n = logits.size(0) * logits.size(1);
  return ops::cross_entropy(ops::reshape(logits, Shape{n, logits.size(2)}),
                            targets.reshape(Shape{n}), ignore_index);
}

namespace {
// gpt_config(name), with options.vocab_size tokens when given.
std::shared_ptr<Module> make_gpt(const std::string& name, Generator& gen,
                                 const ModelOptions& options) {
  GptConfig config = gpt_config(name);
  if (options.vocab_size > 0) config.vocab_size = options.vocab_size;
  return std::make_shared<Gpt>(config, gen);
}
std::shared_ptr<Module> make_gpt_small(Generator& gen, const ModelOptions& options) {
  return make_gpt("gpt-small", gen, options);
}
std::shared_ptr<Module> make_gpt2(Generator& gen, const ModelOptions& options) {
  return make_gpt("gpt2", gen, options);
}
}  // namespace

DPE_REGISTER_MODEL("gpt-small", make_gpt_small,
                   language_model("4 layers, d 256, 4 heads", gpt_config("gpt-small").block_size));
DPE_REGISTER_MODEL("gpt2", make_gpt2,
                   language_model("GPT-2 124 M: 12 layers, d 768, 12 heads",
                                  gpt_config("gpt2").block_size));

}  // namespace dpe::models
