// OpCheck: the argument checks of one backend op, written once for every device type. Each prim
// (prims/*.h) states its checks through it; dispatch() runs them before any table sees the call,
// so messages name the op, the devices and the shapes, with the same text on every device type.
//
// Threading contract: a value used by the thread that dispatches the op.
#pragma once

#include <cstdint>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

class OpCheck {
 public:
  // `first` must be defined: its device runs the op, and every other tensor must be on it.
  OpCheck(const char* op, const Tensor& first);

  // Defined, on this call's device, of dtype `dt`, dense in `format` (contiguous by default;
  // an op's channels-last activations, prim::activation_format).
  void tensor(const Tensor& t, const char* what, DType dt = DType::kFloat32,
              MemoryFormat format = MemoryFormat::kContiguous) const;
  // tensor() plus an exact shape; `against` names where the expected shape comes from.
  void shaped(const Tensor& t, const char* what, const Shape& want, const char* against,
              const Shape& from, DType dt = DType::kFloat32,
              MemoryFormat format = MemoryFormat::kContiguous) const;
  // shaped() when `t` is defined; an undefined optional tensor passes.
  void optional(const Tensor& t, const char* what, const Shape& want, const char* against,
                const Shape& from) const;
  // tensor() of rank r.
  void rank(const Tensor& t, const char* what, int64_t r,
            MemoryFormat format = MemoryFormat::kContiguous) const;
  // An optional per-channel tensor of the input x: undefined, or [c].
  void channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const;

  const char* op() const { return op_; }
  Device device() const { return device_; }

 private:
  const char* op_;
  Device device_;
};

}  // namespace dpe
