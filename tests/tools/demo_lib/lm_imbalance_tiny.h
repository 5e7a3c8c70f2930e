// The tiny language model of lm_imbalance_test and its DDP worker: one layer, a large vocabulary
// (logits dominate, as in a real language model), a few short sequences.
#pragma once

#include "tools/demo_lib/lm_imbalance.h"

namespace dpe::tools {

inline LmImbalanceOptions tiny_lm_options() {
  LmImbalanceOptions o;
  o.config = models::gpt_config("gpt-small");
  o.config.n_layer = 1;
  o.config.n_embd = 32;
  o.config.n_head = 2;
  o.config.vocab_size = 4000;
  o.batch = 4;
  o.context = 32;
  return o;
}

}  // namespace dpe::tools
