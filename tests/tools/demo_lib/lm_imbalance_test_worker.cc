// One rank of lm_imbalance_test: run by profile_lm_ddp as
// `worker --lm-ddp-worker DIR --lm-strategy ddp|zero|grad-op|full [--lm-activation-checkpointing]
// --lm-precision fp32|bf16`.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/tools/demo_lib/lm_imbalance_tiny.h"

int main(int argc, char** argv) {
  const bool ac = argc == 8 && std::string(argv[5]) == "--lm-activation-checkpointing";
  const int precision_at = ac ? 6 : 5;
  if ((argc != 7 && !ac) || std::string(argv[1]) != "--lm-ddp-worker" ||
      std::string(argv[3]) != "--lm-strategy" ||
      std::string(argv[precision_at]) != "--lm-precision") {
    std::fprintf(stderr,
                 "usage: %s --lm-ddp-worker DIR --lm-strategy NAME [--lm-activation-checkpointing] "
                 "--lm-precision fp32|bf16\n",
                 argv[0]);
    return 2;
  }
  try {
    dpe::tools::LmImbalanceOptions o = dpe::tools::tiny_lm_options();
    o.activation_checkpointing = ac;
    o.precision = argv[precision_at + 1];
    dpe::tools::lm_ddp_worker(o, argv[2], dpe::tools::strategy_from_flag(argv[4]));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lm_imbalance_test_worker: %s\n", e.what());
    return 1;
  }
}
