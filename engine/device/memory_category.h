// MemoryCategory: what a block of device memory holds, so a device's peak can be broken down into
// parameters, gradients, optimizer state, activations, gathered outputs... (the imbalance
// report's "what device 0 holds that the others do not").
//
// A new allocation takes the category of the innermost MemoryCategoryScope on the allocating
// thread (kOther outside any scope); code that hands a block a new role afterwards (a gradient
// that becomes a parameter's .grad) retags it (Tensor::set_memory_category).
//
// Threading contract: the current category is thread-local; a scope restores it on the thread that
// made it. Workers that run work for another thread take its category with them (parallel_apply).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpe {

enum class MemoryCategory : uint8_t {
  kOther,
  kParameters,       // a module's parameters and buffers
  kGradients,        // parameters' .grad, including DataParallel's reduced gradients
  kOptimizerState,   // momentum buffers, Adam moments
  kReplicas,         // DataParallel's per-step copies of parameters and buffers
  kInputs,           // the batch and its scattered chunks
  kActivations,      // forward results and backward temporaries
  kOutputs,          // outputs gathered on the output device
  kOutputGradients,  // the loss, and the gradient of the gathered outputs
  kCommunication,    // coalesced buffers and DDP buckets
};
constexpr size_t kMemoryCategoryCount = 10;

// "parameters", "optimizer state", ...
const char* memory_category_name(MemoryCategory category);

MemoryCategory current_memory_category();

class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

}  // namespace dpe
