// The multi-device autograd functions: each records its node, each node's backward equals its
// twin (Scatter <-> Gather, Broadcast <-> ReduceAddCoalesced), gradients land on the devices the
// inputs live on, and a graph built from all four matches the same computation on one device.
#include "engine/parallel/functions.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "tests/util/compare.h"

namespace dpe {
namespace {

const Device kH0 = Device::parse("host:0");
const Device kH1 = Device::parse("host:1");
const Device kH2 = Device::parse("host:2");

std::vector<Device> hosts() {
  set_host_device_count(3);
  return {kH0, kH1, kH2};
}

Tensor values(std::vector<float> v, const Shape& shape, Device d, bool grad = false) {
  Tensor t = Tensor::from_vector(v, shape, d);
  if (grad) t.requires_grad_();
  return t;
}

// Runs the node's backward directly, as the engine does (under no-grad).
std::vector<Tensor> run_backward(const Tensor& output, const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  return output.grad_fn()->apply(grads);
}

void expect_same_tensors(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << i;
    if (!want[i].defined()) continue;
    EXPECT_EQ(got[i].device(), want[i].device()) << i;
    EXPECT_EQ(got[i].shape(), want[i].shape()) << i;
    EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>()) << i;
  }
}

TEST(FunctionsTest, ScatterSplitsAndItsBackwardIsGather) {
  auto devices = hosts();
  Tensor x = values({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 2}, kH0, true);
  std::vector<Tensor> pieces = Scatter::apply(x, devices, {2, 2, 1}, 0);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].device(), kH1);
  EXPECT_EQ(pieces[1].to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(pieces[2].shape(), Shape({1, 2}));
  EXPECT_EQ(pieces[0].grad_fn()->name(), "Scatter");

  std::vector<Tensor> grads{values({1, 1, 1, 1}, {2, 2}, kH0), values({2, 2, 2, 2}, {2, 2}, kH1),
                            values({3, 3}, {1, 2}, kH2)};
  expect_same_tensors(run_backward(pieces[0], grads), {Gather::apply(grads, kH0, 0)});
  // A slice no gradient reached counts as zero.
  std::vector<Tensor> missing{grads[0], Tensor(), grads[2]};
  std::vector<Tensor> g = run_backward(pieces[0], missing);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].device(), kH0);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0, 3, 3}));
}

TEST(FunctionsTest, GatherJoinsAndItsBackwardIsScatter) {
  hosts();
  Tensor a = values({1, 2, 3, 4}, {2, 2}, kH1, true);
  Tensor b = values({5, 6}, {2, 1}, kH2, true);
  Tensor out = Gather::apply({a, b}, kH0, 1);
  EXPECT_EQ(out.device(), kH0);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(out.grad_fn()->name(), "Gather");

  Tensor g = values({10, 20, 30, 40, 50, 60}, {2, 3}, kH0);
  std::vector<Tensor> back = run_backward(out, {g});
  expect_same_tensors(back, Scatter::apply(g, {kH1, kH2}, {2, 1}, 1));
  EXPECT_EQ(back[0].device(), kH1);  // each slice returns to the replica that produced it
  EXPECT_EQ(back[1].to_vector<float>(), (std::vector<float>{30, 60}));
}

TEST(FunctionsTest, BroadcastCopiesAndItsBackwardIsReduceAddCoalesced) {
  auto devices = hosts();
  Tensor w = values({1, 2, 3, 4, 5, 6}, {2, 3}, kH0, true);
  Tensor b = values({7, 8}, {2}, kH0, true);
  auto copies = Broadcast::apply({w, b}, devices);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0][0].raw_data(), w.raw_data());  // on the source device: an alias
  EXPECT_NE(copies[2][0].raw_data(), w.raw_data());
  EXPECT_EQ(copies[2][0].device(), kH2);
  EXPECT_EQ(copies[2][1].to_vector<float>(), (std::vector<float>{7, 8}));
  EXPECT_EQ(copies[1][1].grad_fn()->name(), "Broadcast");

  // Gradients k * 2 + i; device 1 sent none for w.
  std::vector<Tensor> grads;
  std::vector<std::vector<Tensor>> per_device(3);
  for (size_t k = 0; k < 3; ++k) {
    const float s = static_cast<float>(k + 1);
    Tensor gw = k == 1 ? Tensor() : values({s, s, s, s, s, s}, {2, 3}, devices[k]);
    Tensor gb = values({s, 2 * s}, {2}, devices[k]);
    grads.push_back(gw);
    grads.push_back(gb);
    per_device[k] = {gw, gb};
  }
  std::vector<Tensor> back = run_backward(copies[0][0], grads);
  expect_same_tensors(back, ReduceAddCoalesced::apply(per_device, comm::specs_of({w, b}), kH0));
  EXPECT_EQ(back[0].device(), kH0);
  EXPECT_EQ(back[0].to_vector<float>(), (std::vector<float>{4, 4, 4, 4, 4, 4}));
  EXPECT_EQ(back[1].to_vector<float>(), (std::vector<float>{6, 12}));
}

TEST(FunctionsTest, ReduceAddCoalescedSumsAndItsBackwardIsBroadcast) {
  hosts();
  Tensor a1 = values({1, 2}, {2}, kH1, true), b1 = values({3}, {1}, kH1, true);
  Tensor a2 = values({10, 20}, {2}, kH2, true), b2 = values({30}, {1}, kH2, true);
  const auto specs = comm::specs_of({a1, b1});
  std::vector<Tensor> out = ReduceAddCoalesced::apply({{a1, b1}, {a2, b2}}, specs, kH0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].device(), kH0);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{33}));
  EXPECT_EQ(out[0].grad_fn()->name(), "ReduceAddCoalesced");

  std::vector<Tensor> g{values({5, 6}, {2}, kH0), values({7}, {1}, kH0)};
  std::vector<Tensor> want;
  for (const auto& tensors : Broadcast::apply(g, {kH1, kH2})) {
    want.insert(want.end(), tensors.begin(), tensors.end());
  }
  std::vector<Tensor> back = run_backward(out[0], g);
  expect_same_tensors(back, want);
  EXPECT_EQ(back[2].device(), kH2);  // each device's gradients return to it
  // A missing output gradient is broadcast as zeros.
  back = run_backward(out[0], {g[0], Tensor()});
  EXPECT_EQ(back[3].to_vector<float>(), (std::vector<float>{0}));
}

TEST(FunctionsTest, NothingIsRecordedWithoutGradMode) {
  auto devices = hosts();
  Tensor w = values({1, 2}, {2}, kH0, true);
  NoGradGuard no_grad;
  auto copies = Broadcast::apply({w}, devices);
  EXPECT_FALSE(copies[1][0].requires_grad());
  EXPECT_FALSE(Scatter::apply(w, {kH0, kH1}, {1, 1}, 0)[1].requires_grad());
}

// DataParallel's graph in miniature: broadcast w, scatter x, compute on each device, gather on
// device 0, against the same loss on one device. x lives on host:1, so its gradient must too.
TEST(FunctionsTest, AGraphOfAllFourMatchesOneDevice) {
  auto devices = hosts();
  std::vector<float> xv, wv;
  for (int i = 0; i < 7 * 3; ++i) xv.push_back(0.1f * static_cast<float>(i % 5) - 0.2f);
  for (int i = 0; i < 3 * 2; ++i) wv.push_back(0.3f * static_cast<float>(i) - 0.7f);
  Tensor x = values(xv, {7, 3}, kH1, true), w = values(wv, {3, 2}, kH0, true);
  Tensor x_ref = values(xv, {7, 3}, kH0, true), w_ref = values(wv, {3, 2}, kH0, true);

  auto ws = Broadcast::apply({w}, devices);
  auto xs = Scatter::apply(x, devices, {3, 3, 1}, 0);
  std::vector<Tensor> ys;
  for (size_t k = 0; k < 3; ++k) ys.push_back(ops::matmul(xs[k], ws[k][0]));
  Tensor y = Gather::apply(ys, kH0, 0);
  backward(ops::sum(ops::mul(y, y)));

  Tensor y_ref = ops::matmul(x_ref, w_ref);
  backward(ops::sum(ops::mul(y_ref, y_ref)));
  EXPECT_EQ(w.grad().device(), kH0);
  EXPECT_EQ(x.grad().device(), kH1);
  EXPECT_LT(test::rel_error(y.to_vector<float>(), y_ref.to_vector<float>()), 1e-6);
  EXPECT_LT(test::rel_error(w.grad().to_vector<float>(), w_ref.grad().to_vector<float>()), 1e-6);
  EXPECT_LT(test::rel_error(x.grad().to_vector<float>(), x_ref.grad().to_vector<float>()), 1e-6);
}

}  // namespace
}  // namespace dpe
