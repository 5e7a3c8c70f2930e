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

StateIo with_grad_scaler(StateIo io, optim::GradScaler& scaler) {
  const std::string prefix = kGradScalerPrefix;
  io.optimizer_state = [save = io.optimizer_state, &scaler, prefix] {
    StateDict s = save();
    for (const auto& [k, v] : scaler.state_dict()) s.emplace_back(prefix + k, v);
    return s;
  };
  io.load_optimizer = [load = io.load_optimizer, &scaler, prefix](const StateDict& s) {
    StateDict optimizer, scaling;
    for (const auto& [k, v] : s) {
      if (k.rfind(prefix, 0) == 0) {
        scaling.emplace_back(k.substr(prefix.size()), v);
      } else {
        optimizer.emplace_back(k, v);
      }
    }
    // The scaler's entries are checked (and taken) first; the optimizer's refusal then leaves
    // a scaler that the failed resume does not use.
    if (!scaling.empty()) scaler.load_state_dict(scaling);
    load(optimizer);
  };
  return io;
}

}  // namespace dpe::tools
