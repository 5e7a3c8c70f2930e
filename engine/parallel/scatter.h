// scatter: splits a batch along `dim` into one chunk per device, as PyTorch's
// torch/nn/parallel/scatter_gather.py. Chunk sizes are torch.chunk's (ceil(n / k) each, so fewer
// chunks than devices may come back), or explicit sizes (uneven, e.g. a lighter device 0).
// Tensors inside lists and dicts are split alike; other values go unchanged to every chunk.
// Each tensor is split by Scatter (functions.h), whose backward gathers the chunks' gradients
// back to the input's device.
//
// Threading contract: called by the thread that drives the step (any thread); the functions
// touch only their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/value.h"
#include "engine/parallel/step_profiler.h"

namespace dpe {

// The sizes torch.chunk gives for n items over `chunks` pieces: ceil(n / chunks) each.
std::vector<int64_t> chunk_sizes(int64_t n, int64_t chunks);

// Sizes proportional to `weights` (one per device) that sum to n, largest remainders first;
// devices whose share rounds to zero get no chunk.
std::vector<int64_t> weighted_chunk_sizes(int64_t n, const std::vector<double>& weights);

struct Scattered {
  std::vector<Value> chunks;     // one per device used
  std::vector<Device> devices;   // the devices that received a chunk, in order
  std::vector<int64_t> sizes;    // each chunk's size along dim (empty: the input held no tensor)
};

// Splits `input` over `devices` (at most one chunk each). `sizes`, when given, fixes the chunk
// sizes (they must sum to the batch size; a zero skips that device). An empty batch gives every
// device an empty chunk, as PyTorch's scatter (torch.chunk of 0 rows gives one empty piece per
// device), so the module runs on each. Throws for tensors of different sizes along dim, and for
// `sizes` that do not fit.
Scattered scatter(const Value& input, const std::vector<Device>& devices, int64_t dim,
                  const std::vector<int64_t>* sizes = nullptr, StepProfiler* profiler = nullptr);

// The batch size (size along dim) shared by every tensor in `input`; -1 when it holds none.
int64_t batch_size_of(const Value& input, int64_t dim);

}  // namespace dpe
