// Boolean flags whose --help says their default. CLI11 prints an option's default string after
// its type (`--zero BOOLEAN=true`), but for a flag that may stand alone that string is the value a
// lone flag takes, which a reader takes for the default; and a plain flag shows no default at all.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dpe::tools {

// `--name`, `--name true` or `--name false` (alone: true). --help shows "--name [true|false]" and
// ends the help with "(alone: true; default: V)", V the variable's value when this is called.
CLI::Option* add_bool_option(CLI::App& app, const std::string& names, bool& value,
                             const std::string& help);

// A flag that takes no value: given, it sets `value` to true (or to false for a "!--name" flag).
// --help ends the help with "(default: not given)". For tools whose positional arguments follow
// the flags (launch), where a flag that took a value would swallow the next argument.
CLI::Option* add_switch(CLI::App& app, const std::string& names, bool& value,
                        const std::string& help);

}  // namespace dpe::tools
