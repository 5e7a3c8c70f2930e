#include "engine/autograd/grad_mode.h"

namespace dpe {

namespace {
thread_local bool tls_grad_enabled = true;
}  // namespace

bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }

}  // namespace dpe
