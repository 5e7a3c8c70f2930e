#include "engine/tensor/shape.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpe {

namespace {

// The product of max(d, 1) over dims: the extent of the contiguous layout, zero dims included.
// Throws instead of overflowing (signed overflow is undefined behaviour, and a crafted file's
// header can name any sizes).
int64_t checked_extent(const std::vector<int64_t>& dims, size_t from, const Shape& shape) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size(); ++i) {
    DPE_CHECK(dims[i] >= 0, "negative size " << dims[i] << " in " << shape.str());
    DPE_CHECK(!__builtin_mul_overflow(n, std::max<int64_t>(dims[i], 1), &n),
              "shape " << shape.str() << " is too large: the product of its sizes overflows int64");
  }
  return n;
}

}  // namespace

int64_t Shape::numel() const {
  const int64_t extent = checked_extent(dims_, 0, *this);
  for (int64_t d : dims_) {
    if (d == 0) return 0;
  }
  return extent;
}

int64_t Shape::normalize_dim(int64_t dim) const {
  const int64_t r = rank();
  const int64_t d = dim < 0 ? dim + r : dim;
  DPE_CHECK(d >= 0 && d < r, "Dimension out of range (expected to be in range of ["
                                 << -r << ", " << r - 1 << "], but got " << dim << ") for "
                                 << str());
  return d;
}

std::vector<int64_t> Shape::contiguous_strides() const {
  checked_extent(dims_, 0, *this);  // every partial product below then fits
  std::vector<int64_t> strides(dims_.size());
  int64_t s = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(dims_[i], 1);  // PyTorch's strides: a zero size counts as one
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
