// The DataParallel equivalence check shared by the host and CUDA tests: one SGD step of a model
// wrapped in DataParallel over `devices` against the same step on devices[0] alone, on the same
// data — loss, gradients and parameters agree to a relative error under 1e-5.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "tests/util/compare.h"

namespace dpe::test {

struct StepResult {
  float loss;
  StateDict grads;
  StateDict params;
};

// One SGD step (momentum 0.9) of `model` (possibly wrapped) on (x, y) with cross-entropy;
// `inner` is the bare model whose parameters the optimizer updates.
inline StepResult train_step(Module& model, Module& inner, const Tensor& x, const Tensor& y) {
  optim::SgdOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  optim::SGD sgd(inner.parameters(), o);
  Tensor out = model(x);
  Tensor loss = ops::cross_entropy(out, y.to(out.device()));
  backward(loss);
  StepResult r;
  r.loss = loss.item();
  for (auto& [n, p] : inner.named_parameters()) r.grads.emplace_back(n, p.grad().clone());
  sgd.step();
  for (auto& [n, p] : inner.named_parameters()) r.params.emplace_back(n, p.clone());
  return r;
}

inline void expect_same(const StepResult& dp, const StepResult& single, Device home,
                        const std::string& what) {
  EXPECT_NEAR(dp.loss, single.loss, 1e-5 * std::abs(single.loss)) << what;
  ASSERT_EQ(dp.grads.size(), single.grads.size()) << what;
  ASSERT_EQ(dp.params.size(), single.params.size()) << what;
  for (size_t i = 0; i < single.grads.size(); ++i) {
    EXPECT_EQ(dp.grads[i].first, single.grads[i].first) << what;
    EXPECT_EQ(dp.grads[i].second.device(), home) << what << " " << dp.grads[i].first;
    EXPECT_LT(rel_error(dp.grads[i].second.to_vector<float>(),
                        single.grads[i].second.to_vector<float>()),
              1e-5)
        << what << " grad " << single.grads[i].first;
    EXPECT_LT(rel_error(dp.params[i].second.to_vector<float>(),
                        single.params[i].second.to_vector<float>()),
              1e-5)
        << what << " param " << single.params[i].first;
  }
}

// `make` builds the model (on host:0); it is moved to devices[0].
inline void check_equivalence(const std::function<std::shared_ptr<Module>()>& make,
                              const Shape& input_shape, int classes, int batch,
                              const std::vector<Device>& devices) {
  Generator g(42);
  std::vector<int64_t> dims = input_shape.dims();
  dims.insert(dims.begin(), batch);
  Tensor x = randn(Shape(dims), g, devices[0]);
  std::vector<int64_t> labels(batch);
  for (auto& l : labels) l = static_cast<int64_t>(g.next_u64() % classes);
  Tensor y = Tensor::from_vector(labels, {batch}, devices[0]);

  std::shared_ptr<Module> single = make();
  single->to(devices[0]);
  std::shared_ptr<Module> original = single->copy_to(devices[0]);
  StepResult ref = train_step(*single, *single, x, y);

  DataParallel dp(original, devices);
  StepResult got = train_step(dp, *original, x, y);
  expect_same(got, ref, devices[0],
              original->repr() + " on " + std::to_string(devices.size()) + " devices");
}

}  // namespace dpe::test
