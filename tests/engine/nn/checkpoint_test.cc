// Activation checkpointing: gradients (inputs and parameters) equal those without it on a small
// Sequential and a tiny GPT with dropout (seed replay); finite differences of a checkpointed block; less activation memory during forward; a plain
// forward under no_grad; BatchNorm's running statistics updated once; the wrapper transparent to
// every name. DataParallel: tests/engine/parallel/checkpoint_data_parallel_test.cc.
#include "engine/nn/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/dropout.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/tensor/random.h"
#include "models/gpt.h"
#include "tests/util/compare.h"

namespace dpe {
namespace {

using test::rel_error;

std::shared_ptr<nn::Sequential> mlp(uint64_t seed, float dropout = 0.0f, int64_t width = 6,
                                    int layers = 2) {
  Generator gen(seed);
  auto s = std::make_shared<nn::Sequential>();
  int64_t in = 5;
  for (int i = 0; i < layers; ++i) {
    s->push_back(std::make_shared<nn::Linear>(in, width, gen));
    s->push_back(std::make_shared<nn::GELU>());
    in = width;
  }
  if (dropout > 0) s->push_back(std::make_shared<nn::Dropout>(dropout, 42));
  s->push_back(std::make_shared<nn::Linear>(in, 3, gen));
  return s;
}

Tensor input(const Shape& shape, uint64_t seed = 7, Device device = {}) {
  Generator gen(seed);
  Tensor x = randn(shape, gen, device);
  x.requires_grad_(true);
  return x;
}

void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double tol = 1e-6) {
  ASSERT_TRUE(a.defined()) << what << ": undefined";
  ASSERT_TRUE(b.defined()) << what << ": undefined reference";
  EXPECT_LT(rel_error(a.to_vector<float>(), b.to_vector<float>()), tol) << what;
}

void expect_same_grads(const Module& got, const Module& want) {
  const auto g = got.named_parameters(), w = want.named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].first, w[i].first);
    expect_close(g[i].second.grad(), w[i].second.grad(), g[i].first);
  }
}

TEST(CheckpointTest, SequentialGradientsEqualThoseWithoutCheckpointing) {
  // With dropout: the recompute must draw the first run's mask.
  auto plain = mlp(1, 0.3f), ckpt = mlp(1, 0.3f);
  Tensor x1 = input({4, 5}), x2 = input({4, 5});
  for (int step = 0; step < 2; ++step) {
    x1.set_grad(Tensor());
    x2.set_grad(Tensor());
    plain->zero_grad();
    ckpt->zero_grad();
    const Tensor y1 = plain->forward(x1);
    const Tensor y2 = nn::checkpoint(*ckpt, x2);
    EXPECT_EQ(y2.grad_fn()->name(), "CheckpointBackward");
    expect_close(y2, y1, "output");
    backward(ops::sum(ops::mul(y1, y1)));
    backward(ops::sum(ops::mul(y2, y2)));
    expect_close(x2.grad(), x1.grad(), "input gradient, step " + std::to_string(step));
    expect_same_grads(*ckpt, *plain);
  }
}

TEST(CheckpointTest, NoGradAndFrozenInputsRunAPlainForward) {
  auto m = mlp(2);
  const Tensor x = input({3, 5});
  NoGradGuard no_grad;
  const Tensor y = nn::checkpoint(*m, x);
  EXPECT_EQ(y.grad_fn(), nullptr);
  expect_close(y, m->forward(x), "no_grad output");
}

TEST(CheckpointTest, EvalModeStillCheckpointsUnderGradMode) {
  auto m = mlp(3, 0.5f), plain = mlp(3, 0.5f);
  m->eval();
  plain->eval();
  const Tensor x = input({3, 5});
  const Tensor y = nn::checkpoint(*m, x);
  ASSERT_NE(y.grad_fn(), nullptr);
  backward(ops::sum(y));
  backward(ops::sum(plain->forward(x.detach())));
  expect_same_grads(*m, *plain);
}

// <v, f(x)> in double, as the op consistency test (tests/engine/autograd/gradcheck_test.cc).
double project(const Tensor& y, const std::vector<float>& v) {
  const std::vector<float> yv = y.to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * v[i];
  return s;
}

TEST(CheckpointTest, BackwardMatchesCentralDifferences) {
  auto block = std::make_shared<nn::CheckpointWrapper>(mlp(4, 0.0f, 4, 1));
  Tensor x = input({2, 5});
  const Tensor y = block->forward(x);
  Generator gen(9);
  std::vector<float> v(static_cast<size_t>(y.numel()));
  for (float& e : v) e = gen.uniform(-1.0f, 1.0f);
  backward({y}, {Tensor::from_vector(v, y.shape())});

  NoGradGuard no_grad;
  const double h = 1e-3;
  std::vector<std::pair<std::string, Tensor>> checked{{"x", x}};
  for (const auto& np : block->named_parameters()) checked.push_back(np);
  for (auto& [name, t] : checked) {
    const std::vector<float> analytic = t.grad().to_vector<float>();
    const std::vector<float> base = t.to_vector<float>();
    double max_err = 0, max_ref = 1e-3;
    for (size_t k = 0; k < base.size(); ++k) {
      std::vector<float> p = base, m = base;
      p[k] += static_cast<float>(h);
      m[k] -= static_cast<float>(h);
      Tensor data = t;
      data.copy_(Tensor::from_vector(p, t.shape()));
      const double fp = project(block->forward(x), v);
      data.copy_(Tensor::from_vector(m, t.shape()));
      const double fm = project(block->forward(x), v);
      data.copy_(Tensor::from_vector(base, t.shape()));
      const double numeric = (fp - fm) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - analytic[k]));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LT(max_err / max_ref, 2e-2) << name << ": max abs error " << max_err;
  }
}

TEST(CheckpointTest, ParameterWrittenBeforeBackwardIsAnError) {
  auto m = mlp(5);
  const Tensor y = nn::checkpoint(*m, input({2, 5}));
  Tensor w = m->find("0.weight");
  w.fill_(0.5f);
  EXPECT_THROW(backward(ops::sum(y)), Error);
}

models::GptConfig tiny_gpt() {
  models::GptConfig c = models::gpt_config("gpt-small");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 50;
  c.dropout = 0.2f;  // embedding, attention and residual dropout: the seed replay is exercised
  return c;
}

std::pair<Tensor, Tensor> tokens(uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> ids(3 * 9);
  for (auto& t : ids) t = static_cast<int64_t>(gen.next_u64() % 50);
  const Tensor all = Tensor::from_vector(ids, {3, 9});
  return {all.narrow(1, 0, 8).contiguous(), all.narrow(1, 1, 8).contiguous()};
}

TEST(CheckpointGptTest, BlocksCheckpointedGiveTheSameLossesAndGradients) {
  Generator g1(100), g2(100);
  models::Gpt plain(tiny_gpt(), g1), ckpt(tiny_gpt(), g2);
  EXPECT_EQ(nn::apply_activation_checkpointing(ckpt, models::is_gpt_block), 2);
  EXPECT_EQ(nn::apply_activation_checkpointing(ckpt, models::is_gpt_block), 0);  // wrapped once
  const StateDict names_plain = plain.state_dict(), names_ckpt = ckpt.state_dict();
  ASSERT_EQ(names_ckpt.size(), names_plain.size());
  for (size_t i = 0; i < names_plain.size(); ++i) {
    EXPECT_EQ(names_ckpt[i].first, names_plain[i].first);  // "h.0.attn.c_attn.weight", unchanged
  }
  for (int step = 0; step < 2; ++step) {  // the dropout generators advance alike
    plain.zero_grad();
    ckpt.zero_grad();
    const auto [x, y] = tokens(step);
    const Tensor l1 = models::lm_loss(plain.forward(x), y);
    const Tensor l2 = models::lm_loss(ckpt.forward(x), y);
    EXPECT_EQ(l1.item(), l2.item()) << "step " << step;
    backward(l1);
    backward(l2);
    expect_same_grads(ckpt, plain);
  }
}

TEST(CheckpointMemoryTest, ForwardKeepsFewerActivations) {
  const Device dev = Device::parse("host:0");
  Allocator& a = Runtime::get().context(dev).allocator();
  auto peak_activations = [&](bool checkpointed) {
    auto m = mlp(6, 0.0f, 256, 8);
    const Tensor x = input({64, 5}, 7, dev);
    a.reset_peak();
    Tensor y;
    {
      MemoryCategoryScope category(MemoryCategory::kActivations);  // as the trainer's forward
      y = checkpointed ? nn::checkpoint(*m, x) : m->forward(x);
    }
    const int64_t peak = a.stats().peak_by_category[static_cast<size_t>(MemoryCategory::kActivations)];
    backward(ops::sum(y));
    return peak;
  };
  const int64_t without = peak_activations(false), with = peak_activations(true);
  EXPECT_LT(with, without) << "checkpointed " << with << " bytes, plain " << without;
}

TEST(CheckpointBatchNormTest, RunningStatisticsAreUpdatedOnce) {
  Generator g1(8), g2(8);
  auto make = [](Generator& g) {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(5, 4, g));
    s->push_back(std::make_shared<nn::BatchNorm2d>(4));
    return s;
  };
  auto plain = make(g1), ckpt = make(g2);
  const Tensor x = input({6, 5});
  backward(ops::sum(ops::mul(plain->forward(x), plain->forward(x))));
  const Tensor y = nn::checkpoint(*ckpt, x);
  const Tensor y2 = nn::checkpoint(*ckpt, x);
  backward(ops::sum(ops::mul(y, y2)));
  for (const char* b : {"1.running_mean", "1.running_var"}) {
    expect_close(ckpt->find(b), plain->find(b), b);
  }
  EXPECT_EQ(ckpt->find("1.num_batches_tracked").to_vector<int64_t>()[0], 2);
  expect_same_grads(*ckpt, *plain);
}

TEST(CheckpointWrapperTest, TheWrapperIsTransparentToNames) {
  auto plain = mlp(11);
  auto wrapped = mlp(11);
  nn::apply_activation_checkpointing(*wrapped, [](const Module& m) {
    return dynamic_cast<const nn::Linear*>(&m) != nullptr;
  });
  EXPECT_NE(wrapped->child("0").wrapped(), nullptr);
  EXPECT_EQ(wrapped->child("0").named_children()[0].first, "_checkpoint_wrapped_module");
  auto names = [](const StateDict& s) {
    std::vector<std::string> out;
    for (const auto& [n, t] : s) out.push_back(n);
    return out;
  };
  EXPECT_EQ(names(wrapped->named_parameters()), names(plain->named_parameters()));
  EXPECT_EQ(names(wrapped->state_dict()), names(plain->state_dict()));
  EXPECT_EQ(names(wrapped->child("2").named_parameters()), (std::vector<std::string>{"weight", "bias"}));

  // load_state_dict, find and set_parameter reach through the wrapper.
  auto other = mlp(12);
  wrapped->load_state_dict(other->state_dict());
  expect_close(wrapped->find("2.weight"), other->find("2.weight"), "loaded 2.weight");
  const Tensor w = Tensor::zeros({6, 5});
  wrapped->set_parameter("0.weight", w);
  EXPECT_TRUE(wrapped->find("0.weight").is_same(w));

  // copy_to and replicate clone the wrapper with the tree.
  auto copy = wrapped->copy_to(Device::parse("host:0"));
  EXPECT_NE(copy->child("0").wrapped(), nullptr);
  EXPECT_FALSE(copy->find("2.weight").is_same(wrapped->find("2.weight")));
  EXPECT_EQ(names(copy->state_dict()), names(plain->state_dict()));
}

}  // namespace
}  // namespace dpe
