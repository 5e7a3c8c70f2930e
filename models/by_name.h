// The models by the names the tools take on their command lines: the registry (registry.h) with
// every model of this folder linked in. Tools depend on //models:by_name; a new model joins by
// registering itself in its own .cc and being added to that target's deps (models/BUILD).
#pragma once

#include "models/registry.h"
