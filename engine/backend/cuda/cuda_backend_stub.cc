// The CUDA backend where dpe is built without CUDA (--config=nocuda or no toolkit): every device
// type has a backend, and asking for this one says why it is missing.
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/error.h"

namespace dpe {

Backend& cuda_backend() { throw Error("cuda backend: dpe was built without CUDA"); }

}  // namespace dpe
