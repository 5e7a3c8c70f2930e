// DType: the element types dpe tensors hold. float32 for values, int64 for labels and indices.
//
// Threading contract: constants and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dpe {

enum class DType { kFloat32, kInt64 };

inline size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 8; }
inline const char* dtype_name(DType t) { return t == DType::kFloat32 ? "float32" : "int64"; }

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};

}  // namespace dpe
