// DPE_CUDA_CHECK: turns a CUDA runtime error into a dpe::Error naming the call and the device.
// Included only by .cu files and CUDA-enabled translation units.
#pragma once

#include <cuda_runtime.h>

#include "engine/core/error.h"

#define DPE_CUDA_CHECK(call)                                                          \
  do {                                                                                \
    const cudaError_t dpe_err_ = (call);                                              \
    if (dpe_err_ != cudaSuccess) {                                                    \
      int dpe_dev_ = -1;                                                              \
      cudaGetDevice(&dpe_dev_);                                                       \
      DPE_THROW(#call << " failed on cuda:" << dpe_dev_ << ": "                       \
                      << cudaGetErrorString(dpe_err_));                               \
    }                                                                                 \
  } while (0)

