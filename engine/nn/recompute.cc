#include "engine/nn/recompute.h"

namespace dpe::nn {

namespace {
thread_local bool t_recomputing = false;
}  // namespace

bool recomputing() { return t_recomputing; }

RecomputeScope::RecomputeScope() : previous_(t_recomputing) { t_recomputing = true; }
RecomputeScope::~RecomputeScope() { t_recomputing = previous_; }

}  // namespace dpe::nn
