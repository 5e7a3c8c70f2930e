// --precision: one name and one meaning in bench, train and sim. fp32 computes in float32; bf16
// and fp16 are mixed precision as PyTorch's: the forward and the loss under autocast in that
// dtype (torch.autocast's lists), float32 parameters, gradients, optimizer state and checkpoints,
// and for fp16 a GradScaler (bfloat16 has float32's exponent range and needs none).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/core/dtype.h"
#include "engine/device/device.h"

namespace dpe::tools {

// The names bench and train accept (sim adds tf32, a GPU's float32 math).
const std::vector<std::string>& precision_names();

// The autocast dtype of a precision: none for fp32. Throws dpe::Error naming an unknown one.
std::optional<DType> autocast_dtype(const std::string& precision);

// The precision's autocast on device type `type`: enabled in its dtype for bf16 and fp16,
// disabled for fp32 (the forward and loss of every tool's step). Throws as autocast_dtype.
autocast autocast_for(const std::string& precision, DeviceType type);

// Whether the precision trains with a GradScaler: fp16.
bool needs_grad_scaler(const std::string& precision);

}  // namespace dpe::tools
