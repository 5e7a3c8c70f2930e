// DType: the element types dpe tensors hold. float32 for values (and every parameter's master
// copy), bfloat16 and float16 for mixed precision, int64 for labels and indices.
//
// Every choice by dtype is an exhaustive switch, so the compiler names each place a new dtype
// must be handled (-Werror=switch).
//
// Threading contract: constants and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "engine/core/low_precision.h"

namespace dpe {

enum class DType { kFloat32, kInt64, kBFloat16, kFloat16 };

// Every dtype, for the readers that map a file's or a message's code back to one.
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kInt64, DType::kBFloat16,
                                       DType::kFloat16};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
  }
  return 0;  // unreachable: the switch is exhaustive
}

// PyTorch's names: torch.float32, torch.int64, torch.bfloat16, torch.float16.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "?";
}

inline bool is_floating_point(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kBFloat16:
    case DType::kFloat16:
      return true;
    case DType::kInt64:
      return false;
  }
  return false;
}

// torch.promote_types for the floating dtypes: the same dtype, else float32 (bfloat16 with
// float16 is float32 too, as PyTorch's).
inline DType promote_types(DType a, DType b) { return a == b ? a : DType::kFloat32; }

// A set of dtypes (the ones a prim has kernels for on a device type).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType t : dtypes) bits_ |= bit(t);
  }
  constexpr bool has(DType t) const { return (bits_ & bit(t)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }

 private:
  static constexpr unsigned bit(DType t) { return 1u << static_cast<unsigned>(t); }
  unsigned bits_ = 0;
};

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
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<Float16> {
  static constexpr DType value = DType::kFloat16;
};

}  // namespace dpe
