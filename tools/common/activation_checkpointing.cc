#include "tools/common/activation_checkpointing.h"

#include "engine/nn/checkpoint.h"
#include "models/gpt.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

void apply_activation_checkpointing_flag(const std::string& model_name, Module& model) {
  const int wrapped = nn::apply_activation_checkpointing(model, models::is_gpt_block);
  DPE_TOOLS_CHECK(UsageError, wrapped > 0,
                  "--activation-checkpointing: " << model_name
                                                 << " has no unit to checkpoint (the gpt models' "
                                                    "transformer blocks are the only ones)");
}

}  // namespace dpe::tools
