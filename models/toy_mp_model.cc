#include "models/toy_mp_model.h"

#include "engine/autograd/ops.h"
#include "engine/nn/activation.h"
#include "engine/nn/linear.h"

namespace dpe::models {

ToyMpModel::ToyMpModel(Device dev0, Device dev1, Generator& gen) : dev0_(dev0), dev1_(dev1) {
  register_module("net1", std::make_shared<nn::Linear>(10, 10, gen))->to(dev0);
  register_module("relu", std::make_shared<nn::ReLU>());
  register_module("net2", std::make_shared<nn::Linear>(10, 5, gen))->to(dev1);
}

Tensor ToyMpModel::forward(const Tensor& x) {
  const Tensor h = child("relu").forward(child("net1").forward(ops::to(x, dev0_)));
  return child("net2").forward(ops::to(h, dev1_));
}

}  // namespace dpe::models
