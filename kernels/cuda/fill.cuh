// fill: sets every element of a float buffer to a value (CUDA). Launcher takes an explicit stream.
#pragma once

#include <cstdint>

namespace dpe::cuda {

// `stream` is a cudaStream_t passed as void* so that callers need no CUDA headers.
void fill_forward(void* stream, float* out, int64_t n, float value);
// out = a + alpha * b, elementwise.
void add_forward(void* stream, float* out, const float* a, const float* b, float alpha, int64_t n);

}  // namespace dpe::cuda
