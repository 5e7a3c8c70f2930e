// dpe::Error and the check macro used across the engine: every failure is an exception whose
// message names what went wrong (op, device, shape, rank, file), never an abort.
//
// Threading contract: none needed; Error is a value, thrown on the thread that failed and carried
// to the caller by the worker that caught it (device_context.h, parallel_apply.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dpe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device's memory ran out: its allocator's capacity, or the system or the driver refused (as
// torch.OutOfMemoryError). The machine, not the data, is at fault: a tool that turns a reader's
// errors into data errors lets this one through (a failed run, exit code 1).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Builds a message from `<<`-streamed parts; used by DPE_CHECK and DPE_THROW.
class MessageBuilder {
 public:
  template <typename T>
  MessageBuilder& operator<<(const T& v) {
    out_ << v;
    return *this;
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};
}  // namespace detail

}  // namespace dpe

// Throws dpe::Error with the streamed message: DPE_THROW("linear: bad shape " << shape).
#define DPE_THROW(msg)                                          \
  do {                                                          \
    ::dpe::detail::MessageBuilder dpe_mb_;                      \
    dpe_mb_ << msg;                                             \
    throw ::dpe::Error(dpe_mb_.str());                          \
  } while (0)

// Throws dpe::Error with the streamed message unless `cond` holds.
#define DPE_CHECK(cond, msg)  \
  do {                        \
    if (!(cond)) {            \
      DPE_THROW(msg);         \
    }                         \
  } while (0)
