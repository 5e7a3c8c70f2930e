#include "engine/device/memory_category.h"

namespace dpe {
namespace {

thread_local MemoryCategory current = MemoryCategory::kOther;

}  // namespace

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kOther: return "other";
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer state";
    case MemoryCategory::kReplicas: return "replicas";
    case MemoryCategory::kInputs: return "inputs";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kOutputs: return "gathered outputs";
    case MemoryCategory::kOutputGradients: return "loss and output gradients";
    case MemoryCategory::kCommunication: return "communication buffers";
  }
  return "?";
}

MemoryCategory current_memory_category() { return current; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(current) {
  current = category;
}

MemoryCategoryScope::~MemoryCategoryScope() { current = previous_; }

}  // namespace dpe
