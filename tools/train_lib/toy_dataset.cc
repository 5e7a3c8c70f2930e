#include "tools/train_lib/toy_dataset.h"

#include "engine/tensor/random.h"

namespace dpe::tools {

ToyDataset::ToyDataset(int64_t length, uint64_t seed) {
  Generator map_gen(12345);  // the same map for the train and the test split
  const auto w = randn({5, 10}, map_gen).to_vector<float>();
  Generator gen(seed);
  inputs_ = randn({length, 10}, gen);
  const auto x = inputs_.to_vector<float>();
  std::vector<float> y(static_cast<size_t>(length) * 5);
  for (int64_t i = 0; i < length; ++i) {
    for (int j = 0; j < 5; ++j) {
      float s = 0.1f * gen.normal(0.0f, 1.0f);
      for (int k = 0; k < 10; ++k) s += 0.3f * w[j * 10 + k] * x[i * 10 + k];
      y[i * 5 + j] = s;
    }
  }
  targets_ = Tensor::from_vector(y, {length, 5});
}

Example ToyDataset::get(int64_t index) const {
  check_index("ToyDataset", index);
  return {inputs_.narrow(0, index, 1).reshape({10}), targets_.narrow(0, index, 1).reshape({5})};
}

Batch ToyDataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Tensor> xs, ys;
  for (int64_t i : indices) {
    Example e = get(i);
    xs.push_back(e.input);
    ys.push_back(e.target);
  }
  return {stack_on_host(xs, "ToyDataset"), stack_on_host(ys, "ToyDataset")};
}

}  // namespace dpe::tools
