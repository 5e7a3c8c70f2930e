#include "engine/data/dataset.h"

#include <cstring>

#include "engine/core/error.h"

namespace dpe {

void Dataset::check_index(const char* what, int64_t index) const {
  const int64_t n = size();
  DPE_CHECK(index >= 0 && index < n,
            what << ": index " << index << " is out of range for a dataset of size " << n);
}

Tensor stack_on_host(const std::vector<Tensor>& tensors, const char* what) {
  DPE_CHECK(!tensors.empty(), what << ": cannot stack an empty list of tensors");
  const Tensor& first = tensors.front();
  DPE_CHECK(first.defined(), what << ": tensor 0 is undefined");
  std::vector<int64_t> dims{static_cast<int64_t>(tensors.size())};
  dims.insert(dims.end(), first.shape().begin(), first.shape().end());
  Tensor out = Tensor::empty(Shape(dims), first.dtype(), Device());
  const size_t bytes = first.nbytes();
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DPE_CHECK(t.defined(), what << ": tensor " << i << " is undefined");
    DPE_CHECK(t.shape() == first.shape(),
              what << ": expected each tensor to be equal size, but got " << first.shape()
                   << " at entry 0 and " << t.shape() << " at entry " << i);
    DPE_CHECK(t.dtype() == first.dtype(), what << ": expected dtype " << dtype_name(first.dtype())
                                               << " but got " << dtype_name(t.dtype())
                                               << " at entry " << i);
    // Host memory is addressable from here; only other devices need a counted copy.
    const Tensor src = t.device().is_host() ? t.contiguous() : t.to(Device());
    if (bytes > 0) std::memcpy(dst + i * bytes, src.raw_data(), bytes);
  }
  return out;
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  DPE_CHECK(!indices.empty(), "get_batch: empty list of indices");
  std::vector<Tensor> inputs, targets;
  inputs.reserve(indices.size());
  targets.reserve(indices.size());
  bool has_target = false;
  for (size_t i = 0; i < indices.size(); ++i) {
    Example e = get(indices[i]);
    if (i == 0) has_target = e.target.defined();
    DPE_CHECK(e.target.defined() == has_target,
              "get_batch: sample " << indices[i] << (has_target ? " has no" : " has")
                                   << " target, unlike sample " << indices[0]);
    inputs.push_back(std::move(e.input));
    if (has_target) targets.push_back(std::move(e.target));
  }
  Batch batch;
  batch.input = stack_on_host(inputs, "get_batch (input)");
  if (has_target) batch.target = stack_on_host(targets, "get_batch (target)");
  return batch;
}

}  // namespace dpe
