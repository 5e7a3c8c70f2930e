// ResNet: torchvision's resnet50 (v1.5: the bottleneck's stride on its 3x3 conv) under
// torchvision's state_dict names ("layer1.0.conv1.weight", "layer1.0.downsample.1.running_mean",
// "fc.bias"), so a dpe checkpoint maps onto torchvision's by name, shape and order.
//
// Threading contract: as every Module (engine/nn/module.h): one thread at a time per instance.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

struct ResNetConfig {
  std::string name = "resnet50";
  std::vector<int64_t> layers = {3, 4, 6, 3};  // Bottleneck blocks in layer1..layer4
  int64_t num_classes = 1000;
  // conv1's channels and layer1's bottleneck width; layer k's is width * 2^(k-1), its output 4x.
  int64_t width = 64;
  int64_t in_channels = 3;
  bool zero_init_residual = false;  // torchvision's: each block's bn3.weight starts at 0
};

// "resnet50": torchvision's resnet50 (25,557,032 parameters). "resnet101": torchvision's
// resnet101, layers {3, 4, 23, 3} (44,549,160 parameters). "resnet-tiny": layers {1, 1, 1, 1},
// width 8, 10 classes, for 32x32 inputs (and Fashion-MNIST's 28x28 with in_channels 1, as
// //tools:train and //tools:bench use it): trains here in seconds. Throws dpe::Error otherwise.
ResNetConfig resnet_config(const std::string& name);

class ResNet : public Cloneable<ResNet> {
 public:
  // Initialised as torchvision: convs kaiming_normal_(fan_out, relu), BatchNorm 1 and 0, fc
  // nn.Linear's default.
  ResNet(const ResNetConfig& config, Generator& gen);
  // float32 images [N, in_channels, H, W] -> logits [N, num_classes]. Any H, W >= 1: the head
  // averages whatever is left after the five stride-2 stages (7x7 at 224, 1x1 at 32).
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  int64_t num_parameters() const;

 private:
  ResNetConfig config_;
};

// torchvision.models.resnet50(num_classes=num_classes).
std::shared_ptr<ResNet> resnet50(Generator& gen, int64_t num_classes = 1000);

}  // namespace dpe::models
