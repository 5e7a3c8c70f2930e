// Device: the name of one compute device, `host:N` or `cuda:N`, parsed from and printed as text.
// A Device is a plain value; the state of a device lives in its DeviceContext.
//
// Threading contract: a value; copy it freely between threads.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace dpe {

enum class DeviceType { kHost, kCuda };
constexpr int kDeviceTypeCount = 2;
// "host" or "cuda".
const char* device_type_name(DeviceType type);

class Device {
 public:
  Device() = default;
  Device(DeviceType type, int index);

  // Parses "host:1", "cuda:0", or "host"/"cuda" (index 0). Throws dpe::Error on malformed text.
  // Range is checked where the device is used (Runtime::context), since the count is dynamic.
  static Device parse(const std::string& text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_host() const { return type_ == DeviceType::kHost; }
  bool is_cuda() const { return type_ == DeviceType::kCuda; }
  std::string str() const;

  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const {
    return type_ != o.type_ ? type_ < o.type_ : index_ < o.index_;
  }

 private:
  DeviceType type_ = DeviceType::kHost;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace dpe

template <>
struct std::hash<dpe::Device> {
  size_t operator()(const dpe::Device& d) const {
    return std::hash<int>()(d.index() * 2 + (d.is_cuda() ? 1 : 0));
  }
};
