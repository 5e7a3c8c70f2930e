// Gpt: GPT-2's architecture (Radford et al. 2019; OpenAI's gpt-2 repository and HuggingFace's
// GPT2LMHeadModel), under GPT-2's parameter names so a dpe checkpoint maps onto GPT-2's by name
// and shape:
//   wte.weight [V, D], wpe.weight [ctx, D]                  token and learned position embeddings
//   h.<i>.ln_1, h.<i>.attn.c_attn [D, 3D], h.<i>.attn.c_proj [D, D]
//   h.<i>.ln_2, h.<i>.mlp.c_fc [D, 4D], h.<i>.mlp.c_proj [4D, D]   (Conv1D: weight [in, out])
//   ln_f                                                    final LayerNorm
// Pre-LayerNorm blocks of causal multi-head self-attention and a 4x MLP with GELU (tanh form);
// the LM head is tied to wte (logits = x wte^T, no parameter of its own).
// Initialisation as GPT-2's: weights N(0, 0.02), residual projections (c_proj) N(0, 0.02 /
// sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0.
//
// forward takes int64 token ids [B, T] (T <= block_size) and returns logits [B, T, V].
//
// Threading contract: as every Module (engine/nn/module.h): one thread at a time per instance.
#pragma once

#include <string>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

struct GptConfig {
  std::string name;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t block_size = 1024;  // context length
  int64_t vocab_size = 50257;
  float dropout = 0.0f;  // embedding, attention and residual dropout
  float layer_norm_eps = 1e-5f;
};

// "gpt2": the real 124 M configuration (12 layers, d 768, 12 heads, context 1024, vocab 50257,
// dropout 0.1 as published). "gpt-small": 4 layers, d 256, 4 heads, context 128 and a 32 000-token
// vocabulary (the language-model corpus's tokenizer), which trains here in minutes while its
// logits weigh what a real language model's do. Throws dpe::Error naming an unknown name.
GptConfig gpt_config(const std::string& name);

class Gpt : public Cloneable<Gpt> {
 public:
  Gpt(const GptConfig& config, Generator& gen);
  Tensor forward(const Tensor& tokens) override;
  std::string repr() const override;
  // Parameters counted once (the tied head adds none), as GPT-2's "124M".
  int64_t num_parameters() const;

 private:
  GptConfig config_;
};

// True for one transformer block (h.<i>), the unit activation checkpointing wraps:
// nn::apply_activation_checkpointing(model, is_gpt_block) (engine/nn/checkpoint.h).
bool is_gpt_block(const Module& m);

// Mean cross-entropy of logits [B, T, V] against int64 targets [B, T]; targets equal to
// ignore_index (-100, PyTorch's default) do not count.
Tensor lm_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

}  // namespace dpe::models
