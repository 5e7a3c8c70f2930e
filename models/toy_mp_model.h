// ToyMpModel: seed 004's model-parallel toy, Linear(10, 10) on dev0 - ReLU - Linear(10, 5) on
// dev1; the forward moves its input to dev0 and the hidden activations to dev1, so the output is
// on dev1. Wrapped in DistributedDataParallel without device_ids, each rank owns two devices.
#pragma once

#include "engine/device/device.h"
#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

class ToyMpModel : public Cloneable<ToyMpModel> {
 public:
  // The same initialisation as ToyModel(gen), placed on two devices.
  ToyMpModel(Device dev0, Device dev1, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "ToyMpModel"; }

 private:
  Device dev0_, dev1_;
};

}  // namespace dpe::models
