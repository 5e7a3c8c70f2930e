#include "engine/backend/op_table.h"

#include <atomic>
#include <string>

#include "engine/core/error.h"

namespace dpe {

namespace {
std::array<std::atomic<OpTable*>, kDeviceTypeCount>& tables() {
  static std::array<std::atomic<OpTable*>, kDeviceTypeCount> t{};
  return t;
}
}  // namespace

OpTable* find_op_table(DeviceType type) {
  return tables()[static_cast<size_t>(type)].load(std::memory_order_acquire);
}

OpTable& op_table(DeviceType type, const char* op) {
  OpTable* t = find_op_table(type);
  DPE_CHECK(t != nullptr,
            op << ": no backend is registered for " << device_type_name(type) << " devices");
  return *t;
}

void register_op_table(DeviceType type, OpTable& table) {
  OpTable* expected = nullptr;
  DPE_CHECK(tables()[static_cast<size_t>(type)].compare_exchange_strong(expected, &table),
            "register_op_table: " << device_type_name(type) << " already has a table");
}

OpTable* replace_op_table(DeviceType type, OpTable* table) {
  return tables()[static_cast<size_t>(type)].exchange(table, std::memory_order_acq_rel);
}

void throw_unsupported_dtype(const char* op, Device device, DType dtype, DTypeSet supported) {
  std::string names;
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    if (!supported.has(t)) continue;
    names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
  }
  DPE_THROW(op << ": " << device << " has no " << dtype_name(dtype) << " kernel for it ("
               << device_type_name(device.type()) << " devices run it in " << names << ")");
}

bool prim::has_channels_last_kernels(DeviceType type) {
  const OpTable* t = find_op_table(type);
  return t != nullptr && t->channels_last();
}

}  // namespace dpe
