// OpTable: a device type's table of operations, one slot per prim (prims.h), and the registry
// that maps each device type to its table.
//
// Design note "one table per device type, decorated per trace": a device type registers its table
// when its library loads (kernel_table.h builds one from the prims' launches); dispatch() (the
// engine's only way to run a prim) looks the table up by the first tensor's device type after the
// prim's checks. A tool that records or alters what the tables do (the op trace, engine/trace)
// installs a decorator in place of a type's table for its own lifetime and puts the original back:
// nothing in the engine knows, and without one a call costs one atomic load more than a virtual
// call.
//
// Threading contract: run() may be called from any thread, concurrently across devices; calls on
// one device are serialised by the table (kernel_table.h). register_op_table at static
// initialisation; replace_op_table while no op runs.
#pragma once

#include "engine/backend/prims.h"
#include "engine/device/device.h"

namespace dpe {

// Every prim's index, in DPE_PRIMS order.
enum class PrimId : int {
#define DPE_PRIM_ID(Op) Op,
  DPE_PRIMS(DPE_PRIM_ID)
#undef DPE_PRIM_ID
      kCount
};

template <class Op>
constexpr PrimId prim_id();
#define DPE_PRIM_ID_OF(Op)               \
  template <>                            \
  constexpr PrimId prim_id<prim::Op>() { \
    return PrimId::Op;                   \
  }
DPE_PRIMS(DPE_PRIM_ID_OF)
#undef DPE_PRIM_ID_OF

class OpTable {
 public:
  virtual ~OpTable() = default;

  // Runs a checked prim on its first tensor's device.
#define DPE_OP_TABLE_SLOT(Op) virtual void run(const prim::Op& op) = 0;
  DPE_PRIMS(DPE_OP_TABLE_SLOT)
#undef DPE_OP_TABLE_SLOT

  // Whether run() has a kernel for the prim: false only for an optional prim the type lacks.
  virtual bool has(PrimId id) const = 0;
  // The compute dtypes (prim::compute_dtype) the type has kernels of the prim for: float32
  // always; bfloat16 and float16 where it declares them. Nothing converts silently: dispatch
  // refuses another (op, dtype) pair, naming both and the device.
  virtual DTypeSet dtypes(PrimId id) const = 0;

  // Whether the type's convolution, batch norm and max pooling kernels take channels-last
  // activations (prim::activation_format asks, so the prims name no device type).
  virtual bool channels_last() const = 0;
};

// The table of `type`; throws dpe::Error naming the op and the type when none is registered.
OpTable& op_table(DeviceType type, const char* op);
// Throws "<op>: <device> has no <dtype> kernel for it (<type> devices run it in <dtypes>)".
[[noreturn]] void throw_unsupported_dtype(const char* op, Device device, DType dtype,
                                          DTypeSet supported);

// The table of `type`, or null.
OpTable* find_op_table(DeviceType type);
// Registers the table of a device type (its library's static initialiser); once per type.
void register_op_table(DeviceType type, OpTable& table);
// Puts `table` in place of `type`'s table and returns the one it replaces (for decorators).
OpTable* replace_op_table(DeviceType type, OpTable* table);

}  // namespace dpe
