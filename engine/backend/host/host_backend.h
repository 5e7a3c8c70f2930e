// The host device type's Backend (oneDNN and loops), defined in host_backend.cc. Callers use
// backend_for(device), which puts the validating front before it.
//
// Threading contract: as Backend's.
#pragma once

#include "engine/backend/backend.h"

namespace dpe {

// The table itself, unchecked: for engine/backend's front only.
Backend& host_backend();

}  // namespace dpe
