#include "tools/common/bool_flag.h"

namespace dpe::tools {

CLI::Option* add_bool_option(CLI::App& app, const std::string& names, bool& value,
                             const std::string& help) {
  const std::string shown = value ? "true" : "false";
  return app.add_option(names, value, help + " (alone: true; default: " + shown + ")")
      ->expected(0, 1)
      ->default_str("true")  // what CLI11 gives a lone flag
      ->option_text("[true|false]");
}

CLI::Option* add_switch(CLI::App& app, const std::string& names, bool& value,
                        const std::string& help) {
  return app.add_flag(names, value, help + " (default: not given)");
}

}  // namespace dpe::tools
