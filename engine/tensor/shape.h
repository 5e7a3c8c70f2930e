// Shape: the sizes of a tensor. Printed as PyTorch prints them, torch.Size([15, 5]), everywhere,
// so dpe's output reads like the seeds' PyTorch output.
//
// Threading contract: a value; copy it freely between threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace dpe {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t numel() const;
  // Size along `dim`; negative dims count from the end. Throws on out-of-range dims.
  int64_t operator[](int64_t dim) const { return dims_[normalize_dim(dim)]; }
  int64_t& at(int64_t dim) { return dims_[normalize_dim(dim)]; }
  // Maps a possibly negative dim into [0, rank). Throws dpe::Error naming the shape.
  int64_t normalize_dim(int64_t dim) const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>::const_iterator begin() const { return dims_.begin(); }
  std::vector<int64_t>::const_iterator end() const { return dims_.end(); }

  // Row-major (contiguous) strides for this shape.
  std::vector<int64_t> contiguous_strides() const;
  std::string str() const;  // "torch.Size([15, 5])"

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

}  // namespace dpe
