// Shared by the ops' implementation files: device scoping and argument checks.
//
// Threading contract: stateless helpers; callable from any thread that runs an op.
#pragma once

#include <string>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/tensor/tensor.h"

namespace dpe::ops::detail {

inline Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// Inputs of most ops: defined, float32, contiguous (made so), all on the first one's device.
inline Tensor prepare(const char* op, const Tensor& t, const Tensor& first, const char* what) {
  DPE_CHECK(t.defined(), op << ": " << what << " is undefined");
  check_dtype(op, t, DType::kFloat32, what);
  check_same_device(op, first, t);
  return t.contiguous();
}

inline void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  DPE_CHECK(a.shape() == b.shape(), op << ": the size of tensor a " << a.shape()
                                       << " must match the size of tensor b " << b.shape());
}

}  // namespace dpe::ops::detail
