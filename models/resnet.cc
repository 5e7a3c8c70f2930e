#include "models/resnet.h"

#include <cmath>
#include <sstream>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/activation.h"
#include "engine/nn/adaptive_avg_pool.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/fusion.h"
#include "engine/nn/linear.h"
#include "engine/nn/pooling.h"
#include "engine/nn/sequential.h"
#include "models/registry.h"

namespace dpe::models {
namespace {

constexpr int64_t kExpansion = 4;  // a Bottleneck's output is 4x its width

// A bias-free conv with torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu"):
// N(0, 2 / (out * k * k)), in place of nn.Conv2d's default.
std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride,
                                 int64_t padding, Generator& gen) {
  auto c = std::make_shared<nn::Conv2d>(in, out, k, gen, stride, padding, /*bias=*/false);
  const float stddev = std::sqrt(2.0f / static_cast<float>(out * k * k));
  std::vector<float> w(static_cast<size_t>(out * in * k * k));
  for (float& v : w) v = gen.normal(0.0f, stddev);
  c->find("weight").copy_(Tensor::from_vector(w, Shape{out, in, k, k}));
  return c;
}

// torchvision's Bottleneck: 1x1 (width) - 3x3 (width, the stride) - 1x1 (4 width), each followed
// by BatchNorm, ReLU after the first two and after the residual sum.
class Bottleneck : public Cloneable<Bottleneck> {
 public:
  Bottleneck(int64_t in, int64_t width, int64_t stride, bool zero_init_residual, Generator& gen)
      : downsample_(stride != 1 || in != width * kExpansion) {
    const int64_t out = width * kExpansion;
    register_module("conv1", conv(in, width, 1, 1, 0, gen));
    register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
    register_module("conv2", conv(width, width, 3, stride, 1, gen));
    register_module("bn2", std::make_shared<nn::BatchNorm2d>(width));
    register_module("conv3", conv(width, out, 1, 1, 0, gen));
    register_module("bn3", std::make_shared<nn::BatchNorm2d>(out));
    // Each block then starts as the identity, as torchvision's zero_init_residual.
    if (zero_init_residual) find("bn3.weight").copy_(Tensor::zeros({out}));
    register_module("relu", std::make_shared<nn::ReLU>());
    if (downsample_) {
      auto d = std::make_shared<nn::Sequential>();
      d->push_back(conv(in, out, 1, stride, 0, gen));
      d->push_back(std::make_shared<nn::BatchNorm2d>(out));
      register_module("downsample", d);
    }
  }
  Tensor forward(const Tensor& x) override {
    Module& relu = child("relu");
    Tensor h = nn::forward_batch_norm_relu(child("bn1"), relu, child("conv1").forward(x));
    h = nn::forward_batch_norm_relu(child("bn2"), relu, child("conv2").forward(h));
    return nn::forward_batch_norm_add_relu(child("bn3"), relu, child("conv3").forward(h), [&] {
      return downsample_ ? child("downsample").forward(x) : x;
    });
  }
  std::string repr() const override { return "Bottleneck"; }

 private:
  bool downsample_;
};

}  // namespace

ResNetConfig resnet_config(const std::string& name) {
  ResNetConfig c;
  c.name = name;
  if (name == "resnet50") return c;
  if (name == "resnet101") {
    c.layers = {3, 4, 23, 3};
    return c;
  }
  if (name == "resnet-tiny") {
    c.layers = {1, 1, 1, 1};
    c.width = 8;
    c.num_classes = 10;
    return c;
  }
  DPE_THROW("unknown resnet configuration '" << name
                                             << "' (expected resnet50, resnet101 or resnet-tiny)");
}

ResNet::ResNet(const ResNetConfig& c, Generator& gen) : config_(c) {
  bool layers_ok = c.layers.size() == 4;
  for (int64_t n : c.layers) layers_ok = layers_ok && n >= 1;
  DPE_CHECK(layers_ok && c.width > 0 && c.num_classes > 0 && c.in_channels > 0,
            "ResNet: bad configuration " << c.name << " (expected 4 layers of >= 1 block and "
                                         << "positive width, num_classes and in_channels)");
  // Registration order is torchvision's, so state_dict() lists its keys in its order.
  register_module("conv1", conv(c.in_channels, c.width, 7, 2, 3, gen));
  register_module("bn1", std::make_shared<nn::BatchNorm2d>(c.width));
  register_module("relu", std::make_shared<nn::ReLU>());
  register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  int64_t in = c.width;
  for (size_t k = 0; k < 4; ++k) {
    const int64_t width = c.width << k;
    auto layer = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < c.layers[k]; ++b) {
      // layer1 keeps the maxpool's resolution; the others halve it in their first block.
      const int64_t stride = (b == 0 && k > 0) ? 2 : 1;
      layer->push_back(std::make_shared<Bottleneck>(in, width, stride, c.zero_init_residual, gen));
      in = width * kExpansion;
    }
    register_module("layer" + std::to_string(k + 1), layer);
  }
  register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  register_module("fc", std::make_shared<nn::Linear>(in, c.num_classes, gen));
}

Tensor ResNet::forward(const Tensor& x) {
  DPE_CHECK(x.dim() == 4 && x.size(1) == config_.in_channels,
            "ResNet: expected images [N, " << config_.in_channels << ", H, W], got " << x.shape());
  Tensor h = child("conv1").forward(x);
  h = nn::forward_batch_norm_relu_max_pool(child("bn1"), child("relu"), child("maxpool"), h);
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) h = child(layer).forward(h);
  return child("fc").forward(ops::flatten(child("avgpool").forward(h), 1));
}

std::string ResNet::repr() const {
  std::ostringstream os;
  os << "ResNet(" << config_.name << ": layers=[";
  for (size_t i = 0; i < config_.layers.size(); ++i) os << (i ? ", " : "") << config_.layers[i];
  os << "], width=" << config_.width << ", num_classes=" << config_.num_classes << ")";
  return os.str();
}

int64_t ResNet::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

std::shared_ptr<ResNet> resnet50(Generator& gen, int64_t num_classes) {
  ResNetConfig c = resnet_config("resnet50");
  c.num_classes = num_classes;
  return std::make_shared<ResNet>(c, gen);
}

namespace {
// resnet_config(name), with options.in_channels input channels when given.
std::shared_ptr<Module> make_resnet(const std::string& name, Generator& gen,
                                    const ModelOptions& options) {
  ResNetConfig config = resnet_config(name);
  if (options.in_channels > 0) config.in_channels = options.in_channels;
  return std::make_shared<ResNet>(config, gen);
}
std::shared_ptr<Module> make_resnet50(Generator& gen, const ModelOptions& options) {
  return make_resnet("resnet50", gen, options);
}
std::shared_ptr<Module> make_resnet101(Generator& gen, const ModelOptions& options) {
  return make_resnet("resnet101", gen, options);
}
std::shared_ptr<Module> make_resnet_tiny(Generator& gen, const ModelOptions& options) {
  return make_resnet("resnet-tiny", gen, options);
}
}  // namespace

DPE_REGISTER_MODEL("resnet50", make_resnet50,
                   image_classifier("torchvision's ResNet-50, 1000 classes", 224));
DPE_REGISTER_MODEL("resnet101", make_resnet101,
                   image_classifier("torchvision's ResNet-101, 1000 classes", 224));
DPE_REGISTER_MODEL("resnet-tiny", make_resnet_tiny,
                   image_classifier("ResNet-50's layout cut to one Bottleneck per stage, width 8, "
                                    "10 classes: 130 k parameters",
                                    28));

}  // namespace dpe::models
