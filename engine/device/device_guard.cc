#include "engine/device/device_guard.h"

#include <omp.h>

#include "engine/device/device_context.h"

namespace dpe {

namespace {
thread_local DeviceContext* tls_current = nullptr;
}  // namespace

DeviceContext* current_device_context() { return tls_current; }

DeviceGuard::DeviceGuard(DeviceContext* context)
    : previous_(tls_current), previous_threads_(omp_get_max_threads()) {
  tls_current = context;
  if (context != nullptr) context->activate_on_this_thread();
}

DeviceGuard::~DeviceGuard() {
  tls_current = previous_;
  if (previous_ != nullptr) previous_->activate_on_this_thread();
  omp_set_num_threads(previous_threads_);
}

}  // namespace dpe
