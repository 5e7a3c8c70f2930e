#include "engine/tensor/concat.h"

#include "engine/core/error.h"

namespace dpe {

Tensor concat(const char* op, const std::vector<Tensor>& xs, int64_t dim, const Device* device) {
  DPE_CHECK(!xs.empty(), op << ": expected a non-empty list of tensors");
  const Device dst = device ? *device : xs[0].device();
  const Shape& first = xs[0].shape();
  const int64_t d = first.normalize_dim(dim);
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& s = xs[i].shape();
    DPE_CHECK(s.rank() == first.rank() && xs[i].dtype() == xs[0].dtype(),
              op << ": tensor " << i << " " << s << " does not match tensor 0 " << first);
    for (int64_t k = 0; k < s.rank(); ++k) {
      DPE_CHECK(k == d || s[k] == first[k],
                op << ": sizes of tensors must match except in dimension " << d << ": tensor 0 is "
                   << first << ", tensor " << i << " is " << s);
    }
    total += s[d];
  }
  std::vector<int64_t> order{d};
  for (int64_t i = 0; i < first.rank(); ++i) {
    if (i != d) order.push_back(i);
  }
  std::vector<int64_t> back(order.size());
  for (size_t i = 0; i < order.size(); ++i) back[order[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> front_dims;
  for (int64_t i : order) front_dims.push_back(i == d ? total : first[i]);
  Tensor front = Tensor::empty(Shape(front_dims), xs[0].dtype(), dst);
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    front.narrow(0, offset, x.shape()[d]).copy_(d == 0 ? x : x.permute(order));
    offset += x.shape()[d];
  }
  return d == 0 ? front : front.permute(back).contiguous();
}

}  // namespace dpe
