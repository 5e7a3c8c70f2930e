// Comparisons shared by the tests that check a parallel path against the single-device result.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/error.h"

namespace dpe::test {

// ||a - b|| / ||b||, in double.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  DPE_CHECK(a.size() == b.size(), "rel_error: " << a.size() << " vs " << b.size() << " values");
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-12);
}

}  // namespace dpe::test
