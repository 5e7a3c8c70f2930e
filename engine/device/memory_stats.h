// MemoryStats: what a device allocator has handed out, read as one consistent snapshot.
//
// Threading contract: a value; the allocator fills it under its lock, any thread may read a copy.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "engine/device/memory_category.h"

namespace dpe {

struct MemoryStats {
  int64_t current_bytes = 0;     // bytes allocated and not yet freed
  int64_t peak_bytes = 0;        // high-water mark of current_bytes since the last reset_peak
  int64_t allocations = 0;       // number of successful allocations since start
  int64_t capacity_bytes = 0;    // 0: unlimited
  // Indexed by MemoryCategory: what is held now; what was held at the moment of peak_bytes (sums to
  // peak_bytes); each category's own high-water mark. All since the last reset_peak.
  using ByCategory = std::array<int64_t, kMemoryCategoryCount>;
  ByCategory current_by_category{};
  ByCategory at_peak_by_category{};
  ByCategory peak_by_category{};
  // The high-water mark of what the ZeRO paper calls model states (parameters, gradients and
  // optimizer state held together), which its memory formulas predict.
  int64_t peak_model_state_bytes = 0;
};

// Parameters + gradients + optimizer state of a by-category count.
inline int64_t model_states(const MemoryStats::ByCategory& bytes) {
  return bytes[static_cast<size_t>(MemoryCategory::kParameters)] +
         bytes[static_cast<size_t>(MemoryCategory::kGradients)] +
         bytes[static_cast<size_t>(MemoryCategory::kOptimizerState)];
}

// Parses "512MiB", "2GiB", "100MB", "4096" into bytes. Throws dpe::Error naming `what` on bad text.
int64_t parse_memory_size(const std::string& text, const std::string& what);

// "1.50 MiB" style, for reports.
std::string format_bytes(int64_t bytes);

}  // namespace dpe
