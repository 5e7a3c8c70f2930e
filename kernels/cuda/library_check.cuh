// DPE_CUBLAS_CHECK / DPE_CUDNN_CHECK: turn a cuBLAS or cuDNN status into a dpe::Error naming the
// call and the device. Included only by .cu files.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "engine/core/error.h"

#define DPE_CUBLAS_CHECK(call, device)                          \
  do {                                                          \
    const cublasStatus_t dpe_st_ = (call);                      \
    if (dpe_st_ != CUBLAS_STATUS_SUCCESS) {                     \
      DPE_THROW(#call << " failed on cuda:" << (device) << ": " \
                      << cublasGetStatusString(dpe_st_));       \
    }                                                           \
  } while (0)

#define DPE_CUDNN_CHECK(call, device)                                                             \
  do {                                                                                            \
    const cudnnStatus_t dpe_st_ = (call);                                                         \
    if (dpe_st_ != CUDNN_STATUS_SUCCESS) {                                                        \
      DPE_THROW(#call << " failed on cuda:" << (device) << ": " << cudnnGetErrorString(dpe_st_)); \
    }                                                                                             \
  } while (0)
