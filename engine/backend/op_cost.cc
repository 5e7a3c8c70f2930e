#include "engine/backend/op_cost.h"

#include <algorithm>

namespace dpe::op_cost {

OpCost make(const char* op_class, double flops, std::initializer_list<const Tensor*> reads,
            std::initializer_list<const Tensor*> writes) {
  OpCost c;
  c.op_class = op_class;
  c.flops = flops;
  bool dtype_found = false;
  for (std::initializer_list<const Tensor*> list : {reads, writes}) {
    for (const Tensor* t : list) {
      if (dtype_found || !t->defined() || !is_floating_point(t->dtype())) continue;
      c.dtype = t->dtype();
      dtype_found = true;
    }
  }
  for (const Tensor* t : reads) {
    if (!t->defined()) continue;
    c.bytes_read += static_cast<int64_t>(t->nbytes());
    c.shapes.push_back(t->shape().dims());
  }
  for (const Tensor* t : writes) {
    if (!t->defined()) continue;
    c.bytes_written += static_cast<int64_t>(t->nbytes());
    c.shapes.push_back(t->shape().dims());
  }
  return c;
}

OpCost elementwise(const char* op_class, double flops_per_element, const Tensor& first,
                   std::initializer_list<const Tensor*> reads,
                   std::initializer_list<const Tensor*> writes) {
  return make(op_class, flops_per_element * static_cast<double>(first.numel()), reads, writes);
}

double conv2d_flops(const Tensor& w, const Tensor& y) {
  // y [N, O, Ho, Wo], w [O, C, kh, kw]: every output element is C * kh * kw multiply-adds.
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.numel() / w.size(0));
}

namespace {

// The kernel taps, summed over `out` output positions, that land inside an input of `size`.
double taps_inside(int64_t size, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  int64_t taps = 0;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t first = o * stride - padding;  // the input position of tap 0
    taps += std::max<int64_t>(0, std::min(first + kernel, size) - std::max<int64_t>(first, 0));
  }
  return static_cast<double>(taps);
}

}  // namespace

double conv2d_padding_flops(const Tensor& x, const Tensor& w, const Tensor& y, int64_t stride,
                            int64_t padding) {
  const double inside = 2.0 * static_cast<double>(y.size(0) * y.size(1) * w.size(1)) *
                        taps_inside(x.size(2), y.size(2), w.size(2), stride, padding) *
                        taps_inside(x.size(3), y.size(3), w.size(3), stride, padding);
  return conv2d_flops(w, y) - inside;
}

}  // namespace dpe::op_cost
