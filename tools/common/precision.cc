#include "tools/common/precision.h"

#include "engine/core/error.h"

namespace dpe::tools {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  return names;
}

std::optional<DType> autocast_dtype(const std::string& precision) {
  if (precision == "fp32") return std::nullopt;
  if (precision == "bf16") return DType::kBFloat16;
  if (precision == "fp16") return DType::kFloat16;
  DPE_THROW("--precision " << precision << ": expected fp32, bf16 or fp16");
}

autocast autocast_for(const std::string& precision, DeviceType type) {
  const std::optional<DType> dt = autocast_dtype(precision);
  return autocast(type, dt.value_or(DType::kBFloat16), dt.has_value());
}

bool needs_grad_scaler(const std::string& precision) { return precision == "fp16"; }

}  // namespace dpe::tools
