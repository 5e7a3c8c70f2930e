// Grad mode: whether ops record the autograd graph on this thread (PyTorch's no_grad).
// Thread-local; threads that run work for another thread copy its mode (see parallel_apply).
//
// Threading contract: the mode is thread-local; a GradModeGuard restores it on the thread that
// made it.
#pragma once

namespace dpe {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Sets the mode for a scope and restores the previous one.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// with torch.no_grad():
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace dpe
