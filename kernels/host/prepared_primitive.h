// PreparedPrimitive: a oneDNN primitive cached in a HostContext together with its argument
// memories (whose data handles are swapped per call) and its own scratchpad, so executing it
// allocates nothing. For kernel .cc files only: this header includes oneDNN.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>

#include "kernels/host/host_context.h"

namespace dpe::host {

struct PreparedPrimitive : HostContext::CacheEntry {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;

  // Declares argument `arg` with layout `md`; its data is given by set() before each run().
  void bind(HostContext& ctx, int arg, const dnnl::memory::desc& md) {
    args.emplace(arg, dnnl::memory(md, ctx.engine(), DNNL_MEMORY_NONE));
  }
  // Takes the primitive and allocates its scratchpad (the pd must use scratchpad_mode::user).
  void finish(HostContext& ctx, dnnl::primitive p, const dnnl::primitive_desc_base& pd) {
    prim = std::move(p);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), ctx.engine()));
  }
  void set(int arg, const void* p) { args.at(arg).set_data_handle(const_cast<void*>(p)); }
  void run(HostContext& ctx) {
    prim.execute(ctx.stream(), args);
    ctx.stream().wait();
  }
};

// Attributes every cached primitive is built with: a user-owned scratchpad.
inline dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace dpe::host
