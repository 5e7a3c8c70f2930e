#include "engine/backend/op_cost.h"

namespace dpe::op_cost {

OpCost make(const char* op_class, double flops, std::initializer_list<const Tensor*> reads,
            std::initializer_list<const Tensor*> writes) {
  OpCost c;
  c.op_class = op_class;
  c.flops = flops;
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

}  // namespace dpe::op_cost
