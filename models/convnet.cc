#include "models/convnet.h"

#include "engine/autograd/ops.h"
#include "engine/nn/activation.h"
#include "engine/nn/pooling.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "models/registry.h"

namespace dpe::models {

namespace {

std::shared_ptr<nn::Sequential> block(int64_t in, int64_t out, bool batch_norm, Generator& gen) {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv2d>(in, out, 5, gen, 1, 2));
  if (batch_norm) s->push_back(std::make_shared<nn::BatchNorm2d>(out));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::MaxPool2d>(2));
  return s;
}

}  // namespace

ConvNet::ConvNet(Generator& gen, bool batch_norm, int64_t num_classes) {
  register_module("layer1", block(1, 16, batch_norm, gen));
  register_module("layer2", block(16, 32, batch_norm, gen));
  register_module("fc", std::make_shared<nn::Linear>(7 * 7 * 32, num_classes, gen));
}

Tensor ConvNet::forward(const Tensor& x) {
  Tensor h = child("layer2").forward(child("layer1").forward(x));
  return child("fc").forward(ops::flatten(h, 1));
}

namespace {
std::shared_ptr<Module> make_convnet(Generator& gen, const ModelOptions&) {
  return std::make_shared<ConvNet>(gen);
}
}  // namespace

DPE_REGISTER_MODEL("convnet", make_convnet,
                   image_classifier("two conv-BN-ReLU-pool layers and a linear head", 28));

}  // namespace dpe::models
