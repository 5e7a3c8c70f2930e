#include "models/mlp.h"

#include "engine/nn/activation.h"
#include "engine/nn/flatten.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"

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

}  // namespace dpe::models
