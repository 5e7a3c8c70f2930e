// Accumulation offers (design note "accumulation offers", engine/autograd/node.h): a gradient that
// already arrived for a node's input, alone and held by nothing else, is offered to the node; an op
// that adds its part into it returns it, one that ignores it gets the plain sum.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

// The identity, whose backward is `f` of the incoming gradient.
Tensor probe(const Tensor& x, std::function<Tensor(const Tensor&)> f) {
  Tensor out = x.detach().clone();
  record("probe", {x}, {&out},
         [f](const std::vector<Tensor>& g) { return std::vector<Tensor>{f(g[0])}; });
  return out;
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randn(shape, gen);
  t.requires_grad_();
  return t;
}

TEST(AccumulationOfferTest, SlicesOfOneTensorGetTheirGradientsInOne) {
  // Slices along dim 0 (contiguous: added into the offer) and along dim 1 (strided: the plain
  // path), each scaled by its own factor: x's gradient is that factor on each slice.
  for (const int64_t dim : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    Tensor x = leaf(Shape{3, 3, 4}, 1);
    Tensor loss;
    for (int64_t i = 0; i < 3; ++i) {
      Tensor part = ops::sum(ops::mul(
          ops::narrow(x, dim, i, 1),
          Tensor::full(dim == 0 ? Shape{1, 3, 4} : Shape{3, 1, 4}, static_cast<float>(i + 2))));
      loss = loss.defined() ? ops::add(loss, part) : part;
    }
    backward(loss);
    const std::vector<float> g = x.grad().to_vector<float>();
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t c = 0; c < 4; ++c) {
          EXPECT_EQ(g[(a * 3 + b) * 4 + c], static_cast<float>((dim == 0 ? a : b) + 2));
        }
      }
    }
  }
}

TEST(AccumulationOfferTest, ATiedEmbeddingAddsItsRowsIntoTheHeadsGradient) {
  // A language model's tied weight: the embedding's rows and the head's logits from one [V, D]. The
  // head's gradient arrives first; the embedding's rows are added into it. The same bits as the
  // two gradients of two separate weights, summed.
  const int64_t vocab = 50, dim = 8;
  Generator gen(5);
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>{3, 7, 3, 49, 0, 7}, Shape{6});
  const Tensor r = randn(Shape{6, vocab}, gen);
  const auto loss = [&](const Tensor& emb, const Tensor& head) {
    return ops::sum(ops::mul(ops::linear(ops::embedding(emb, tokens), head, Tensor()), r));
  };
  Tensor w = leaf(Shape{vocab, dim}, 6);
  backward(loss(w, w));
  Tensor w_emb = w.detach().clone(), w_head = w.detach().clone();
  w_emb.requires_grad_();
  w_head.requires_grad_();
  backward(loss(w_emb, w_head));
  const std::vector<float> tied = w.grad().to_vector<float>();
  const std::vector<float> e = w_emb.grad().to_vector<float>(),
                           h = w_head.grad().to_vector<float>();
  for (size_t k = 0; k < tied.size(); ++k) EXPECT_EQ(tied[k], h[k] + e[k]) << k;
}

TEST(AccumulationOfferTest, TheSecondGradientIsOfferedTheFirstAndAnUntakenOfferIsSummed) {
  Tensor x = leaf(Shape{5}, 2);
  int offers = 0;
  const auto plain = [&](float v) {
    return [&offers, v](const Tensor& g) {
      if (offered_accumulator(0).defined()) ++offers;
      return ops::mul(g, Tensor::full(g.shape(), v));
    };
  };
  backward(ops::add(ops::sum(probe(x, plain(2.0f))), ops::sum(probe(x, plain(3.0f)))));
  EXPECT_EQ(offers, 1);  // the second node to run; the first had nothing to be offered
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 5.0f);
}

TEST(AccumulationOfferTest, ATakenOfferIsTheGradient) {
  Tensor x = leaf(Shape{5}, 3);
  const float* first = nullptr;
  int taken = 0;
  const auto op = [&](float v) {
    return [&, v](const Tensor& g) {
      Tensor acc = offered_accumulator(0);
      if (!acc.defined()) {
        Tensor mine = ops::mul(g, Tensor::full(g.shape(), v));
        first = mine.data<float>();
        return mine;
      }
      ++taken;
      float* a = acc.data<float>();
      for (int64_t i = 0; i < acc.numel(); ++i) a[i] += v * g.data<float>()[i];
      return acc;
    };
  };
  backward(ops::add(ops::sum(probe(x, op(2.0f))), ops::sum(probe(x, op(3.0f)))));
  EXPECT_EQ(taken, 1);
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 5.0f);
  // No sum was made: .grad is the first gradient itself.
  EXPECT_EQ(x.grad().data<float>(), first);
}

TEST(AccumulationOfferTest, AGradientHeldElsewhereIsNotOffered) {
  Tensor x = leaf(Shape{5}, 4);
  Tensor kept;  // a second handle on the first gradient
  int offers = 0;
  const auto op = [&](const Tensor& g) {
    if (offered_accumulator(0).defined()) ++offers;
    Tensor mine = g.clone();
    if (!kept.defined()) kept = mine;
    return mine;
  };
  backward(ops::add(ops::sum(probe(x, op)), ops::sum(probe(x, op))));
  EXPECT_EQ(offers, 0);
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 2.0f);
  for (float v : kept.to_vector<float>()) EXPECT_EQ(v, 1.0f);  // not added into
}

}  // namespace
}  // namespace dpe
