#include "tools/cost_model/zero.h"

#include "engine/core/error.h"

namespace dpe::sim {

ModelStateBytes model_state_bytes_per_parameter(Precision precision, const std::string& optimizer) {
  const bool adam = optimizer == "adam" || optimizer == "adamw";
  DPE_CHECK(adam || optimizer == "sgd",
            "zero_model_state_bytes: optimizer '" << optimizer << "' (adam, adamw or sgd)");
  ModelStateBytes b;
  if (is_mixed(precision)) {
    b.parameters = 2;
    b.gradients = 2;
    b.optimizer_state = adam ? 12 : 8;  // fp32 master copy + two moments / one momentum buffer
  } else {
    b.parameters = 4;
    b.gradients = 4;
    b.optimizer_state = adam ? 8 : 4;
  }
  return b;
}

ModelStateBytes zero_model_state_bytes(int stage, int64_t params, int world, Precision precision,
                                       const std::string& optimizer) {
  DPE_CHECK(stage >= 0 && stage <= 3, "zero_model_state_bytes: stage " << stage << " (0..3)");
  DPE_CHECK(params >= 0 && world >= 1,
            "zero_model_state_bytes: " << params << " parameters on " << world << " GPUs");
  const ModelStateBytes per = model_state_bytes_per_parameter(precision, optimizer);
  const double psi = static_cast<double>(params), n = world;
  ModelStateBytes out;
  out.parameters = per.parameters * psi / (stage >= 3 ? n : 1);
  out.gradients = per.gradients * psi / (stage >= 2 ? n : 1);
  out.optimizer_state = per.optimizer_state * psi / (stage >= 1 ? n : 1);
  return out;
}

}  // namespace dpe::sim
