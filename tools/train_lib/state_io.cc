#include "tools/train_lib/state_io.h"

#include "engine/distributed/fully_sharded_data_parallel.h"

namespace dpe::tools {

StateIo state_io(Module& model, Module& net, optim::Optimizer& opt) {
  if (auto* fsdp = dynamic_cast<FullyShardedDataParallel*>(&net)) {
    return {
        true, [fsdp] { return fsdp->full_state_dict(); },
        [fsdp, &opt] { return fsdp->full_optim_state_dict(opt.state_dict()); },
        [fsdp](const StateDict& s) { fsdp->load_full_state_dict(s); },
        [fsdp, &opt](const StateDict& s) { opt.load_state_dict(fsdp->shard_optim_state_dict(s)); }};
  }
  return {false, [&model] { return model.state_dict(); }, [&opt] { return opt.state_dict(); },
          [&model](const StateDict& s) { model.load_state_dict(s); },
          [&opt](const StateDict& s) { opt.load_state_dict(s); }};
}

}  // namespace dpe::tools
