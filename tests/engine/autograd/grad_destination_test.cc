// Gradient destinations (design note "gradient destinations", engine/autograd/node.h): a leaf's
// gradient goes straight into the view its owner named, scaled, only when one node produces it
// and the leaf has no .grad; every other case gives the plain gradient, as without a destination.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

Tensor leaf(const Shape& shape, Generator& gen, Device device = {}) {
  Tensor t = randn(shape, gen, device);
  t.requires_grad_();
  return t;
}

// A destination for `t` in the middle of a buffer (so an accidental whole-storage steal shows).
std::shared_ptr<GradDestination> destination_for(const Tensor& t, float scale, Tensor& buffer) {
  buffer = Tensor::full(Shape{t.numel() + 8}, -1.0f, t.device());
  auto d = std::make_shared<GradDestination>();
  d->view = buffer.narrow(0, 4, t.numel()).view(t.shape());
  d->scale = scale;
  t.autograd().grad_destination = d;
  return d;
}

bool is_view_of(const Tensor& t, const std::shared_ptr<GradDestination>& d) {
  return t.shares_storage(d->view) && t.impl()->offset == d->view.impl()->offset;
}

std::vector<float> scaled(const Tensor& t, float s) {
  std::vector<float> v = t.to_vector<float>();
  for (float& x : v) x *= s;
  return v;
}

// backward() of the loss every case here uses: sum(linear(x, w, b)^2).
void backward_of_squares(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = ops::linear(x, w, b);
  backward(ops::sum(ops::mul(y, y)));
}

// The plain gradients of w and b for that loss, without destinations.
std::pair<Tensor, Tensor> plain_grads(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor w2 = w.detach().clone(), b2 = b.detach().clone();
  w2.requires_grad_();
  b2.requires_grad_();
  backward_of_squares(x, w2, b2);
  return {w2.grad(), b2.grad()};
}

TEST(GradDestinationTest, ALinearWritesItsScaledGradientsIntoTheDestinations) {
  Generator gen(3);
  const Tensor x = randn({5, 7}, gen);
  Tensor w = leaf({4, 7}, gen), b = leaf({4}, gen), wbuf, bbuf;
  const auto [gw, gb] = plain_grads(x, w, b);
  auto dw = destination_for(w, 0.5f, wbuf), db = destination_for(b, 0.5f, bbuf);
  backward_of_squares(x, w, b);
  EXPECT_TRUE(dw->written);
  EXPECT_TRUE(db->written);
  EXPECT_TRUE(is_view_of(w.grad(), dw));
  EXPECT_TRUE(is_view_of(b.grad(), db));
  EXPECT_EQ(w.grad().to_vector<float>(), scaled(gw, 0.5f));  // a power of two: exact
  EXPECT_EQ(b.grad().to_vector<float>(), scaled(gb, 0.5f));
  EXPECT_EQ(wbuf.to_vector<float>()[0], -1.0f);  // nothing written outside the view
  EXPECT_EQ(wbuf.to_vector<float>().back(), -1.0f);
}

// Only one of a linear's weight and bias has a destination (scaled by 0.25): it gets the scaled
// gradient there, the other its plain gradient.
void expect_only_the_offered_one_scaled(bool weight_offered, uint64_t seed) {
  SCOPED_TRACE(weight_offered ? "only the weight offered" : "only the bias offered");
  Generator gen(seed);
  const Tensor x = randn({3, 6}, gen);
  Tensor w = leaf({2, 6}, gen), b = leaf({2}, gen), buf;
  const auto [gw, gb] = plain_grads(x, w, b);
  auto d = destination_for(weight_offered ? w : b, 0.25f, buf);
  backward_of_squares(x, w, b);
  EXPECT_TRUE(d->written);
  EXPECT_EQ(w.grad().to_vector<float>(),
            weight_offered ? scaled(gw, 0.25f) : gw.to_vector<float>());
  EXPECT_EQ(b.grad().to_vector<float>(),
            weight_offered ? gb.to_vector<float>() : scaled(gb, 0.25f));
}

TEST(GradDestinationTest, ABiasWithoutAMatchingOfferGetsItsPlainGradient) {
  expect_only_the_offered_one_scaled(/*weight_offered=*/true, 4);
}

TEST(GradDestinationTest, AWeightWithoutAnOfferGetsItsPlainGradientBesideAScaledBias) {
  expect_only_the_offered_one_scaled(/*weight_offered=*/false, 9);
}

TEST(GradDestinationTest, ALeafWithTwoProducersGetsItsPlainGradient) {
  Generator gen(5);
  const Tensor x = randn({3, 4}, gen);
  Tensor w = leaf({4, 4}, gen), buf;
  Tensor w2 = w.detach().clone();
  w2.requires_grad_();
  backward(ops::sum(ops::linear(ops::linear(x, w2, Tensor()), w2, Tensor())));
  auto d = destination_for(w, 0.5f, buf);
  backward(ops::sum(ops::linear(ops::linear(x, w, Tensor()), w, Tensor())));
  EXPECT_FALSE(d->written);
  EXPECT_FALSE(is_view_of(w.grad(), d));
  EXPECT_EQ(w.grad().to_vector<float>(), w2.grad().to_vector<float>());
}

TEST(GradDestinationTest, ALeafThatHasAGradAccumulatesIntoIt) {
  Generator gen(6);
  const Tensor x = randn({3, 5}, gen);
  Tensor w = leaf({2, 5}, gen), buf;
  backward(ops::sum(ops::linear(x, w, Tensor())));
  const std::vector<float> once = w.grad().to_vector<float>();
  auto d = destination_for(w, 0.5f, buf);
  backward(ops::sum(ops::linear(x, w, Tensor())));
  EXPECT_FALSE(d->written);
  EXPECT_FALSE(is_view_of(w.grad(), d));
  EXPECT_EQ(w.grad().to_vector<float>(), scaled(Tensor::from_vector(once, {2, 5}), 2.0f));
}

TEST(GradDestinationTest, AnOpThatIgnoresTheOfferGivesThePlainGradient) {
  Generator gen(7);
  const Tensor x = randn({6}, gen);
  Tensor w = leaf({6}, gen), buf;
  auto d = destination_for(w, 0.5f, buf);
  backward(ops::sum(ops::mul(x, w)));
  EXPECT_FALSE(d->written);
  EXPECT_EQ(w.grad().to_vector<float>(), x.to_vector<float>());
}

TEST(GradDestinationTest, AGraphOverTwoDevicesWritesOnTheLeafsDevice) {
  set_host_devices({2, 1, 0});
  const Device d1(DeviceType::kHost, 1);
  Generator gen(8);
  const Tensor x = randn({4, 3}, gen);
  Tensor w = leaf({2, 3}, gen, d1), b = leaf({2}, gen, d1), wbuf, bbuf;
  const auto [gw, gb] = plain_grads(x.to(d1), w, b);
  auto dw = destination_for(w, 0.5f, wbuf), db = destination_for(b, 0.5f, bbuf);
  Tensor y = ops::to(ops::linear(ops::to(x, d1), w, b), Device());
  backward(ops::sum(ops::mul(y, y)));  // the engine runs host:1's nodes on its worker
  EXPECT_TRUE(dw->written);
  EXPECT_TRUE(is_view_of(w.grad(), dw));
  EXPECT_EQ(w.grad().device(), d1);
  EXPECT_EQ(w.grad().to_vector<float>(), scaled(gw, 0.5f));
  EXPECT_EQ(b.grad().to_vector<float>(), scaled(gb, 0.5f));
}

}  // namespace
}  // namespace dpe
