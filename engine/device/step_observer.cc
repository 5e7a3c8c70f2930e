#include "engine/device/step_observer.h"

namespace dpe {

namespace detail {
std::atomic<StepObserver*> g_step_observer{nullptr};
}  // namespace detail

StepObserver* set_step_observer(StepObserver* observer) {
  return detail::g_step_observer.exchange(observer, std::memory_order_acq_rel);
}

}  // namespace dpe
