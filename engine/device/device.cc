#include "engine/device/device.h"

#include <cctype>

#include "engine/core/error.h"

namespace dpe {

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  DPE_CHECK(index >= 0, "device index must be non-negative, got " << index);
}

Device Device::parse(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  DeviceType type;
  if (kind == "host" || kind == "cpu") {
    type = DeviceType::kHost;
  } else if (kind == "cuda") {
    type = DeviceType::kCuda;
  } else {
    DPE_THROW("malformed device '" << text << "': expected host:N or cuda:N");
  }
  if (colon == std::string::npos) return Device(type, 0);
  const std::string digits = text.substr(colon + 1);
  bool ok = !digits.empty() && digits.size() <= 6;
  for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  DPE_CHECK(ok, "malformed device '" << text << "': the index after ':' must be a number");
  return Device(type, std::stoi(digits));
}

const char* device_type_name(DeviceType type) {
  return type == DeviceType::kCuda ? "cuda" : "host";
}

std::string Device::str() const {
  return std::string(device_type_name(type_)) + ":" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace dpe
