// Dataset: the interface every data source implements (PyTorch's torch.utils.data.Dataset), the
// Example one index yields and the Batch a list of indices yields, stacked along dim 0.
//
// Threading contract: get() and get_batch() are const and must be safe to call from several
// threads at once (DataLoader calls them from its prefetch thread while the caller trains);
// the datasets in engine/data are immutable after construction, which gives this for free.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {

// One sample. `target` is undefined for unlabelled data (RandomDataset).
struct Example {
  Tensor input;
  Tensor target;
};

// Samples stacked along a new dim 0: input [B, ...], target [B, ...] or undefined.
struct Batch {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // len(dataset).
  virtual int64_t size() const = 0;
  // dataset[index], 0 <= index < size(). Throws dpe::Error naming the index and the size.
  virtual Example get(int64_t index) const = 0;
  // The samples at `indices` stacked along dim 0, on host:0. The default stacks get(i) for each
  // index; datasets that hold their data in one tensor override it with a gather. Throws
  // dpe::Error on an empty list, an index out of range, or samples whose shapes, dtypes or
  // target presence differ.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;

 protected:
  // Throws "<what>: index I is out of range for a dataset of size N" unless 0 <= index < size().
  void check_index(const char* what, int64_t index) const;
};

// Stacks same-shape, same-dtype tensors (any device) into one new contiguous tensor on host:0
// with a new leading dim: n tensors of shape S give [n, S...]. `what` names the caller in errors.
Tensor stack_on_host(const std::vector<Tensor>& tensors, const char* what);

}  // namespace dpe
