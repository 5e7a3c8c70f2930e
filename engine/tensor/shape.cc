#include "engine/tensor/shape.h"

#include "engine/core/error.h"

namespace dpe {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::normalize_dim(int64_t dim) const {
  const int64_t r = rank();
  const int64_t d = dim < 0 ? dim + r : dim;
  DPE_CHECK(d >= 0 && d < r, "dimension out of range (expected to be in range of ["
                                 << -r << ", " << r - 1 << "], but got " << dim << ") for "
                                 << str());
  return d;
}

std::vector<int64_t> Shape::contiguous_strides() const {
  std::vector<int64_t> strides(dims_.size());
  int64_t s = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims_[i];
  }
  return strides;
}

std::string Shape::str() const {
  std::string out = "torch.Size([";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + "])";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace dpe
