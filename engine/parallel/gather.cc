#include "engine/parallel/gather.h"

#include <cstdio>
#include <mutex>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/parallel/functions.h"

namespace dpe {

namespace {

// One tensor of the output, gathered from every replica's corresponding tensor.
Tensor gather_tensors(std::vector<Tensor> parts, Device target, int64_t dim) {
  bool all_scalars = true;
  for (const Tensor& p : parts) all_scalars = all_scalars && p.dim() == 0;
  if (all_scalars) {
    DPE_CHECK(dim == 0, "gather: cannot gather scalars along dim " << dim);
    // PyTorch warns once per process and does the same.
    static std::once_flag warned;
    std::call_once(warned, [] {
      std::fprintf(stderr,
                   "dpe warning: Was asked to gather along dimension 0, but all input tensors "
                   "were scalars; will instead unsqueeze and return a vector.\n");
    });
    for (Tensor& p : parts) p = ops::reshape(p, Shape{1});
  }
  return Gather::apply(parts, target, dim);
}

}  // namespace

Value gather(const std::vector<Value>& outputs, Device target, int64_t dim,
             StepProfiler* profiler) {
  DPE_CHECK(!outputs.empty(), "gather: no outputs to gather");
  StepProfiler::Scope scope(profiler, target, Phase::kGather);
  // columns[j][k]: the j-th tensor (in for_each_tensor's order) of replica k's output.
  std::vector<std::vector<Tensor>> columns;
  outputs[0].for_each_tensor([&](const Tensor& t) { columns.push_back({t}); });
  for (size_t k = 1; k < outputs.size(); ++k) {
    size_t j = 0;
    outputs[k].for_each_tensor([&](const Tensor& t) {
      DPE_CHECK(j < columns.size(), "gather: replica outputs differ in structure (replica "
                                        << k << " holds more tensors than replica 0)");
      columns[j++].push_back(t);
    });
    DPE_CHECK(j == columns.size(), "gather: replica outputs differ in structure (replica "
                                       << k << " holds " << j << " tensors, replica 0 holds "
                                       << columns.size() << ")");
  }
  // The first output's structure, each tensor replaced by its gathered column; non-tensor
  // values are the first replica's.
  size_t next = 0;
  return outputs[0].map_tensors(
      [&](const Tensor&) { return Value(gather_tensors(columns[next++], target, dim)); });
}

}  // namespace dpe
