// KernelTable<Kernels>: a device type's OpTable built from the prims' launches (prims.h), one
// template for every device type whose kernels share the prims' signatures. `Kernels` is the
// device type's policy:
//   static constexpr const char* kName;       the device type ("host", "cuda");
//   template <class Op> static constexpr bool implements;   false for an optional prim it lacks;
//   static constexpr bool kChannelsLast;      whether its convolution, batch norm and max pooling
//       kernels take channels-last activations (OpTable::channels_last);
//   static constexpr bool kLowPrecision;      whether it launches the 16-bit kernels of the prims
//       that have them (prim::has_low_precision_v); float32 only otherwise;
//   class Call { explicit Call(const Tensor& t); KernelContext& ctx(); };   the kernels' context
//       of t's device, held (locked) for one call.
//
// Threading contract: as OpTable's; Kernels::Call serialises calls on one device.
#pragma once

#include "engine/backend/op_table.h"
#include "engine/core/error.h"

namespace dpe {

template <class Kernels>
class KernelTable final : public OpTable {
 public:
#define DPE_KERNEL_TABLE_SLOT(Op) \
  void run(const prim::Op& op) override { launch(op); }
  DPE_PRIMS(DPE_KERNEL_TABLE_SLOT)
#undef DPE_KERNEL_TABLE_SLOT

  bool has(PrimId id) const override { return kHas[static_cast<int>(id)]; }
  DTypeSet dtypes(PrimId id) const override { return kDTypes[static_cast<int>(id)]; }
  bool channels_last() const override { return Kernels::kChannelsLast; }

 private:
  template <class Op>
  static void launch(const Op& op) {
    static_assert(Kernels::template implements<Op> || prim::is_optional_v<Op>,
                  "a device type may lack only optional prims");
    if constexpr (Kernels::template implements<Op>) {
      typename Kernels::Call call(op.first());
      if constexpr (low_precision<Op>()) {
        if (prim::compute_dtype(op) != DType::kFloat32) return op.launch_lowp(call.ctx());
      }
      op.launch(call.ctx());
    } else {
      DPE_THROW(Op::kName << ": " << Kernels::kName << " devices have no kernel for it");
    }
  }

  // Whether the type runs Op's 16-bit kernels: it declares kLowPrecision and the prim has them.
  template <class Op>
  static constexpr bool low_precision() {
    return Kernels::kLowPrecision && prim::has_low_precision_v<Op>;
  }
  template <class Op>
  static constexpr DTypeSet dtypes_of() {
    if (low_precision<Op>()) return {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
    return {DType::kFloat32};
  }
  static constexpr DTypeSet kDTypes[] = {
#define DPE_KERNEL_TABLE_DTYPES(Op) dtypes_of<prim::Op>(),
      DPE_PRIMS(DPE_KERNEL_TABLE_DTYPES)
#undef DPE_KERNEL_TABLE_DTYPES
  };

  static constexpr bool kHas[] = {
#define DPE_KERNEL_TABLE_HAS(Op) Kernels::template implements<prim::Op>,
      DPE_PRIMS(DPE_KERNEL_TABLE_HAS)
#undef DPE_KERNEL_TABLE_HAS
  };
  static_assert(sizeof(kHas) / sizeof(kHas[0]) == static_cast<size_t>(PrimId::kCount));
};

}  // namespace dpe
