// Memory layout kernels on the host, the twins of kernels/cuda/copy.cuh: a strided view gathered
// into a contiguous buffer, and fills with an element of any width. Memory-bound: the copy merges
// the dims its source walks as one and takes permuted views in tiles, so that it reads and writes
// whole cache lines; no SIMD of its own.
//
// Threading contract: pure functions of their arguments; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpe::host {

// Copies the strided view (sizes, strides in elements of elem_size bytes: 1, 2, 4 or 8, starting
// at src) into contiguous dst. Throws dpe::Error for another element size.
void strided_copy(void* dst, const void* src, size_t elem_size, int rank, const int64_t* sizes,
                  const int64_t* strides);
// Sets n elements of elem_size bytes (1, 2, 4 or 8) at dst to the bytes at `value`.
void fill(void* dst, const void* value, size_t elem_size, int64_t n);

}  // namespace dpe::host
