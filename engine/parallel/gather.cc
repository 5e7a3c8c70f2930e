#include "engine/parallel/gather.h"

#include <cstdio>
#include <mutex>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"

namespace dpe {

namespace {

Value gather_value(const std::vector<Value>& outputs, Device target, int64_t dim) {
  const Value& first = outputs[0];
  if (first.is_tensor()) {
    std::vector<Tensor> parts;
    bool all_scalars = true;
    for (const Value& v : outputs) {
      DPE_CHECK(v.is_tensor(), "gather: replica outputs differ in kind (" << v.kind()
                                                                          << " and tensor)");
      parts.push_back(v.tensor());
      all_scalars = all_scalars && v.tensor().dim() == 0;
    }
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
    return ops::cat(parts, dim, &target);
  }
  if (first.is_list()) {
    ValueList out;
    for (size_t i = 0; i < first.list().size(); ++i) {
      std::vector<Value> column;
      for (const Value& v : outputs) column.push_back(v.list().at(i));
      out.push_back(gather_value(column, target, dim));
    }
    return out;
  }
  if (first.is_dict()) {
    ValueDict out;
    for (const auto& [key, e] : first.dict()) {
      std::vector<Value> column;
      for (const Value& v : outputs) column.push_back(v.at(key));
      out.emplace_back(key, gather_value(column, target, dim));
    }
    return out;
  }
  return first;  // non-tensor outputs: the first replica's
}

}  // namespace

Value gather(const std::vector<Value>& outputs, Device target, int64_t dim,
             StepProfiler* profiler) {
  DPE_CHECK(!outputs.empty(), "gather: no outputs to gather");
  StepProfiler::Scope scope(profiler, target, Phase::kGather);
  return gather_value(outputs, target, dim);
}

}  // namespace dpe
