// The CUDA device type's Backend (cuBLAS, cuDNN and dpe's kernels), defined in cuda_backend.cc;
// where CUDA is not built, cuda_backend_stub.cc defines it to throw. Callers use
// backend_for(device), which puts the validating front before it.
//
// Threading contract: as Backend's.
#pragma once

#include "engine/backend/backend.h"

namespace dpe {

// The table itself, unchecked: for engine/backend's front only.
Backend& cuda_backend();

}  // namespace dpe
