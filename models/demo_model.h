// DemoModel: the seeds' Model(input_size, output_size), one Linear layer that can print
// "  In Model: input size torch.Size([15, 5]) output size torch.Size([15, 2])" on every call,
// so the DataParallel demo shows what each replica receives.
#pragma once

#include <functional>
#include <string>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

class DemoModel : public Cloneable<DemoModel> {
 public:
  DemoModel(int64_t input_size, int64_t output_size, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "Model"; }
  // Receives the line for each call; empty (default) prints nothing. Replicas share it.
  void set_printer(std::function<void(const std::string&)> printer) { printer_ = std::move(printer); }

 private:
  std::function<void(const std::string&)> printer_;
};

}  // namespace dpe::models
