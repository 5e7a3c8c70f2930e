// Embedding: rows of a weight at int64 indices; the backward scatter-adds, into a gradient that
// already arrived where one is offered.
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::prepare;

Tensor embedding(const Tensor& weight_in, const Tensor& index_in) {
  Tensor weight = prepare("embedding", weight_in, weight_in, "weight");
  DPE_CHECK(index_in.defined(), "embedding: indices are undefined");
  check_dtype("embedding", index_in, DType::kInt64, "indices");
  check_same_device("embedding", weight, index_in);
  DPE_CHECK(weight.dim() == 2, "embedding: expected a 2-D weight [V, D], got " << weight.shape());
  const int64_t n = index_in.numel(), d = weight.size(1);
  Tensor index = index_in.contiguous().view(Shape{n});
  std::vector<int64_t> out_dims(index_in.shape().begin(), index_in.shape().end());
  out_dims.push_back(d);
  DeviceGuard guard(&weight.context());
  Tensor y = Tensor::empty(Shape(out_dims), DType::kFloat32, weight.device());
  Tensor rows = y.view(Shape{n, d});
  dispatch(prim::EmbeddingForward{weight, index, rows});
  const Shape w_shape = weight.shape();
  record("embedding", {weight_in}, {&y},
         [index, w_shape, n, d](const std::vector<Tensor>& g) {
           const Tensor gy = g[0].contiguous().view(Shape{n, d});
           // Into a gradient of the weight that already arrived, where the engine offers one
           // (node.h, "accumulation offers"): a tied embedding's head gradient gets the rows the
           // tokens name added, with no [V, D] of zeros and no [V, D] sum.
           Tensor acc = offered_accumulator(0);
           if (acc.defined() && acc.shape() == w_shape &&
               supports<prim::EmbeddingBackwardAccumulate>(acc.device())) {
             dispatch(prim::EmbeddingBackwardAccumulate{index, gy, acc});
             return std::vector<Tensor>{acc};
           }
           Tensor gw = Tensor::empty(w_shape, DType::kFloat32, g[0].device());
           dispatch(prim::EmbeddingBackward{index, gy, gw});
           return std::vector<Tensor>{gw};
         },
         {index});
  return y;
}

}  // namespace dpe::ops
