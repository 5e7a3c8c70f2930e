#include "engine/backend/op_check.h"

#include "engine/core/error.h"

namespace dpe {

OpCheck::OpCheck(const char* op, const Tensor& first) : op_(op) {
  DPE_CHECK(first.defined(), op << ": the first tensor argument is undefined");
  device_ = first.device();
  if (is_floating_point(first.dtype())) dtype_ = first.dtype();
}

void OpCheck::tensor(const Tensor& t, const char* what, std::optional<DType> dt,
                     MemoryFormat format) const {
  DPE_CHECK(t.defined(), op_ << ": " << what << " is an undefined tensor");
  DPE_CHECK(t.device() == device_, op_ << ": expected all tensors to be on the same device, "
                                          "but found at least two devices, "
                                       << device_ << " and " << t.device() << " (" << what << ")");
  check_dtype(op_, t, dt.value_or(dtype_), what);
  if (format == MemoryFormat::kContiguous) {
    DPE_CHECK(t.is_contiguous(),
              op_ << ": " << what << " of shape " << t.shape() << " must be contiguous");
  } else {
    DPE_CHECK(t.is_contiguous(format), op_ << ": " << what << " of shape " << t.shape()
                                           << " must be " << memory_format_name(format)
                                           << ", as the input is");
  }
}

void OpCheck::shaped(const Tensor& t, const char* what, const Shape& want, const char* against,
                     const Shape& from, std::optional<DType> dt, MemoryFormat format) const {
  tensor(t, what, dt, format);
  DPE_CHECK(t.shape() == want, op_ << ": expected " << what << " of shape " << want << " for "
                                   << against << " of shape " << from << ", but got " << t.shape());
}

void OpCheck::optional(const Tensor& t, const char* what, const Shape& want, const char* against,
                       const Shape& from) const {
  if (t.defined()) shaped(t, what, want, against, from);
}

void OpCheck::rank(const Tensor& t, const char* what, int64_t r, MemoryFormat format) const {
  tensor(t, what, std::nullopt, format);
  DPE_CHECK(t.dim() == r,
            op_ << ": expected a " << r << "-D " << what << ", but got shape " << t.shape());
}

void OpCheck::channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const {
  if (t.defined()) shaped(t, what, Shape{c}, "input", x.shape(), DType::kFloat32);
}

}  // namespace dpe
