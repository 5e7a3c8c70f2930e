#include "models/demo_model.h"

#include "engine/nn/linear.h"

namespace dpe::models {

DemoModel::DemoModel(int64_t input_size, int64_t output_size, Generator& gen) {
  register_module("fc", std::make_shared<nn::Linear>(input_size, output_size, gen));
}

Tensor DemoModel::forward(const Tensor& x) {
  Tensor y = child("fc").forward(x);
  if (printer_) {
    printer_("  In Model: input size " + x.shape().str() + " output size " + y.shape().str());
  }
  return y;
}

}  // namespace dpe::models
