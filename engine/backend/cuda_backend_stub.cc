// Stand-in for the CUDA backend until engine/backend/cuda_backend.cc lands (and for builds
// without it): every device type has a backend, and asking for this one says why it is missing.
#include "engine/backend/cuda_backend.h"
#include "engine/core/error.h"

namespace dpe {

Backend& cuda_backend() { throw Error("cuda backend: not built"); }

}  // namespace dpe
