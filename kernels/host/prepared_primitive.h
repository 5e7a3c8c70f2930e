// PreparedPrimitive: a oneDNN primitive cached in a HostContext together with its argument
// memories (the caller's buffers are swapped in per call), the reorders between the caller's
// plain layouts and the blocked layouts the primitive chose, and its own scratchpad, so running
// it allocates nothing. For kernel .cc files only: this header includes oneDNN.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/host/host_context.h"

namespace dpe::host {

struct PreparedPrimitive : HostContext::CacheEntry {
  struct Reorder {
    dnnl::reorder prim;
    dnnl::memory from, to;
  };
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;  // what the primitive reads and writes
  std::unordered_map<int, dnnl::memory> user;  // the caller's buffers, set() before each run()
  std::vector<Reorder> before, after;          // into and out of the primitive's layouts

  // Declares argument `arg`, held by the caller in layout `user_md`.
  void bind(HostContext& ctx, int arg, const dnnl::memory::desc& user_md) {
    bind(ctx, arg, user_md, user_md, false);
  }
  // The same, where the primitive wants layout `prim_md`: a buffer of that layout is kept here
  // and reordered from the caller's (inputs) or to it (outputs) on each run.
  void bind(HostContext& ctx, int arg, const dnnl::memory::desc& user_md,
            const dnnl::memory::desc& prim_md, bool output) {
    dnnl::memory u(user_md, ctx.engine(), DNNL_MEMORY_NONE);
    user.emplace(arg, u);
    if (prim_md == user_md) {
      args.emplace(arg, u);
      return;
    }
    dnnl::memory inner(prim_md, ctx.engine());
    args.emplace(arg, inner);
    if (output) {
      after.push_back({dnnl::reorder(inner, u), inner, u});
    } else {
      before.push_back({dnnl::reorder(u, inner), u, inner});
    }
  }
  // Takes the primitive and allocates its scratchpad (the pd must use scratchpad_mode::user).
  void finish(HostContext& ctx, dnnl::primitive p, const dnnl::primitive_desc_base& pd) {
    prim = std::move(p);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), ctx.engine()));
  }
  void set(int arg, const void* p) { user.at(arg).set_data_handle(const_cast<void*>(p)); }
  // Reorders the inputs in (all but the one already in `skip`, if given), runs the primitive,
  // reorders the outputs out.
  void run(HostContext& ctx, const dnnl::memory* skip = nullptr) {
    for (Reorder& r : before) {
      if (skip == nullptr || r.to.get() != skip->get()) r.prim.execute(ctx.stream(), r.from, r.to);
    }
    prim.execute(ctx.stream(), args);
    for (Reorder& r : after) r.prim.execute(ctx.stream(), r.from, r.to);
    ctx.stream().wait();
  }
  // Runs with input `arg` already in this primitive's layout in `other`'s buffer for it (the
  // same tensor reordered by `other` just before: a convolution's output gradient, read by both
  // backward passes), so this primitive's reorder of `arg` is skipped. A plain run() where the
  // two layouts differ or either reads the caller's buffer directly.
  void run_sharing(HostContext& ctx, int arg, const PreparedPrimitive& other) {
    if (!reorders(arg) || !other.reorders(arg) ||
        other.args.at(arg).get_desc() != args.at(arg).get_desc()) {
      run(ctx);
      return;
    }
    // `other`'s buffer stands in for this one's; this one's is back however the run ends.
    struct Restore {
      dnnl::memory& slot;
      dnnl::memory own;
      ~Restore() { slot = own; }
    } restore{args.at(arg), std::exchange(args.at(arg), other.args.at(arg))};
    run(ctx, &restore.own);
  }
  // Whether input `arg` is reordered into a buffer of the primitive's layout before it runs.
  bool reorders(int arg) const {
    const auto it = args.find(arg);
    return it != args.end() && std::any_of(before.begin(), before.end(), [&](const Reorder& r) {
             return r.to.get() == it->second.get();
           });
  }
};

// Attributes every cached primitive is built with: a user-owned scratchpad.
inline dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace dpe::host
