#include "models/mlp.h"

#include "engine/nn/activation.h"
#include "engine/nn/flatten.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "models/registry.h"

namespace dpe::models {

Mlp::Mlp(Generator& gen) {
  register_module("layers", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<Module>>{
                                std::make_shared<nn::Flatten>(),
                                std::make_shared<nn::Linear>(784, 512, gen),
                                std::make_shared<nn::ReLU>(),
                                std::make_shared<nn::Linear>(512, 512, gen),
                                std::make_shared<nn::ReLU>(),
                                std::make_shared<nn::Linear>(512, 10, gen),
                            }));
}

Tensor Mlp::forward(const Tensor& x) { return child("layers").forward(x); }

namespace {
std::shared_ptr<Module> make_mlp(Generator& gen, const ModelOptions&) {
  return std::make_shared<Mlp>(gen);
}
}  // namespace

DPE_REGISTER_MODEL("mlp", make_mlp, image_classifier("784-512-512-10 perceptron", 28));

}  // namespace dpe::models
