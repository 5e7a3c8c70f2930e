// OpCheck: the argument checks of one backend op, written once for every device type. Each prim
// (prims/*.h) states its checks through it; dispatch() runs them before any table sees the call,
// so messages name the op, the devices and the shapes, with the same text on every device type.
//
// Threading contract: a value used by the thread that dispatches the op.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

class OpCheck {
 public:
  // `first` must be defined: its device runs the op, and every other tensor must be on it. Its
  // dtype is the op's compute dtype when it is a floating one (else float32): the dtype the
  // op's floating tensors share unless a check names another.
  OpCheck(const char* op, const Tensor& first);

  // Defined, on this call's device, of dtype `dt` (the compute dtype when not given), dense in
  // `format` (contiguous by default; an op's channels-last activations, prim::activation_format).
  void tensor(const Tensor& t, const char* what, std::optional<DType> dt = std::nullopt,
              MemoryFormat format = MemoryFormat::kContiguous) const;
  // tensor() plus an exact shape; `against` names where the expected shape comes from.
  void shaped(const Tensor& t, const char* what, const Shape& want, const char* against,
              const Shape& from, std::optional<DType> dt = std::nullopt,
              MemoryFormat format = MemoryFormat::kContiguous) const;
  // shaped() when `t` is defined; an undefined optional tensor passes.
  void optional(const Tensor& t, const char* what, const Shape& want, const char* against,
                const Shape& from) const;
  // tensor() of rank r.
  void rank(const Tensor& t, const char* what, int64_t r,
            MemoryFormat format = MemoryFormat::kContiguous) const;
  // An optional per-channel tensor of the input x: undefined, or [c], float32 whatever x's dtype
  // (batch norm's parameters and statistics stay float32, as PyTorch's under autocast).
  void channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const;

  const char* op() const { return op_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }

 private:
  const char* op_;
  Device device_;
  DType dtype_ = DType::kFloat32;
};

}  // namespace dpe
