#include "models/toy_model.h"

#include "engine/nn/activation.h"
#include "engine/nn/linear.h"

namespace dpe::models {

ToyModel::ToyModel(Generator& gen) {
  register_module("net1", std::make_shared<nn::Linear>(10, 10, gen));
  register_module("relu", std::make_shared<nn::ReLU>());
  register_module("net2", std::make_shared<nn::Linear>(10, 5, gen));
}

Tensor ToyModel::forward(const Tensor& x) {
  return child("net2").forward(child("relu").forward(child("net1").forward(x)));
}

}  // namespace dpe::models
