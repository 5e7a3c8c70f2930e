// Gpt: GPT-2's parameter names and shapes (a strict load of PyTorch-made weights under GPT-2's
// names), logits equal to a PyTorch reference of GPT-2's forward (golden/make_gpt_golden.py),
// the 124 M count of the real configuration, and a model that learns.
#include "models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/autograd/engine.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/optim/adam.h"

namespace dpe::models {
namespace {

const char kGolden[] = "tests/models/golden/gpt_tiny.safetensors";

GptConfig tiny() {
  GptConfig c;
  c.name = "tiny";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 97;
  return c;
}

TEST(GptTest, LogitsMatchPyTorchForTheSameWeightsUnderGpt2sNames) {
  StateDict golden = load_safetensors(kGolden);
  Tensor tokens, expected;
  StateDict weights;
  for (auto& [name, t] : golden) {
    if (name == "golden.tokens") tokens = t;
    else if (name == "golden.logits") expected = t;
    else weights.emplace_back(name, t);
  }
  ASSERT_TRUE(tokens.defined() && expected.defined());
  Generator gen(0);
  Gpt model(tiny(), gen);
  model.load_state_dict(weights);  // strict: every name and shape is GPT-2's
  model.eval();
  const Tensor logits = model(tokens);
  ASSERT_EQ(logits.shape(), expected.shape());
  const auto got = logits.to_vector<float>(), want = expected.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  EXPECT_LT(worst, 1e-4) << "largest difference from PyTorch's logits";
}

TEST(GptTest, Gpt2HasGpt2sNamesAndItsParameterCount) {
  Generator gen(0);
  Gpt model(gpt_config("gpt2"), gen);
  EXPECT_EQ(model.num_parameters(), 124439808);  // GPT-2 "124M", the head tied to wte
  const StateDict sd = model.state_dict();
  EXPECT_EQ(sd.front().first, "wte.weight");
  EXPECT_EQ(sd.front().second.shape(), Shape({50257, 768}));
  EXPECT_EQ(model.find("h.11.attn.c_attn.weight").shape(), Shape({768, 2304}));
  EXPECT_EQ(model.find("h.0.mlp.c_proj.weight").shape(), Shape({3072, 768}));
  EXPECT_EQ(sd.back().first, "ln_f.bias");
  EXPECT_THROW(gpt_config("gpt5"), Error);
}

TEST(GptTest, SmallConfigurationHasALanguageModelsVocabulary) {
  const GptConfig c = gpt_config("gpt-small");
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.block_size, 128);
  EXPECT_GE(c.vocab_size, 32000);
}

TEST(GptTest, BadInputsAreNamed) {
  Generator gen(1);
  Gpt model(tiny(), gen);
  try {
    model(Tensor::zeros({1, 17}, DType::kInt64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the context of 16"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model(Tensor::zeros({1, 4})), Error);  // float tokens
}

TEST(GptTest, LearnsARepeatedSequence) {
  Generator gen(2);
  Gpt model(tiny(), gen);
  std::vector<int64_t> seq(2 * 12);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int64_t>((i * 7) % 13);
  const Tensor tokens = Tensor::from_vector(seq, {2, 12});
  std::vector<int64_t> next(seq.size());
  for (size_t i = 0; i < seq.size(); ++i) next[i] = static_cast<int64_t>(((i + 1) * 7) % 13);
  const Tensor targets = Tensor::from_vector(next, {2, 12});
  optim::AdamWOptions o;
  o.lr = 3e-3f;
  optim::AdamW opt(model.parameters(), o);
  float first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    model.zero_grad();
    const Tensor loss = lm_loss(model(tokens), targets);
    backward(loss);
    opt.step();
    (step == 0 ? first : last) = loss.to_vector<float>()[0];
  }
  EXPECT_NEAR(first, std::log(97.0f), 0.5f);  // near uniform at initialisation
  EXPECT_LT(last, 0.5f * first);
}

}  // namespace
}  // namespace dpe::models
