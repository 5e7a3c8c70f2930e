// names: how the cost model's tables (GPUs, frameworks, presets, nvidia-smi's header cells) match
// a name the user typed, and list the known ones in an error.
//
// Threading contract: pure functions; call them from any thread.
#pragma once

#include <string>
#include <vector>

namespace dpe::sim {

// Lowercase, without spaces, '-' and '_' (every character but letters and digits):
// "A100-SXM4-80GB" and "a100 sxm4 80gb" are one name.
std::string normalized_name(const std::string& s);
// "a, b, c".
std::string joined_names(const std::vector<std::string>& names);

}  // namespace dpe::sim
