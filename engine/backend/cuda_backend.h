// The CUDA backend (cuBLAS, cuDNN and dpe's kernels), defined in cuda_backend.cc; where the CUDA
// backend is not built, cuda_backend_stub.cc defines it to throw.
#pragma once

#include "engine/backend/backend.h"

namespace dpe {

Backend& cuda_backend();

}  // namespace dpe
