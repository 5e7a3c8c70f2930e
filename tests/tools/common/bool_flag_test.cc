// add_bool_option and add_switch (tools/common/bool_flag.h): what each accepts, and a --help that
// shows the variable's default rather than the value a lone flag takes.
#include "tools/common/bool_flag.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dpe::tools {
namespace {

// Parses `args` (after the program name) into an app with `--zero` (an option, default `initial`)
// and `--quiet` (a switch); returns the --zero value.
bool parse_zero(std::vector<std::string> args, bool initial, bool* quiet = nullptr) {
  CLI::App app;
  bool zero = initial, q = false;
  add_bool_option(app, "--zero", zero, "shard the optimizer");
  add_switch(app, "--quiet", q, "no progress line");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);  // CLI11 takes the arguments last first
  if (quiet != nullptr) *quiet = q;
  return zero;
}

TEST(BoolFlagTest, AnOptionTakesTrueOrFalseOrStandsAloneForTrue) {
  EXPECT_FALSE(parse_zero({}, false));
  EXPECT_TRUE(parse_zero({}, true));
  EXPECT_TRUE(parse_zero({"--zero"}, false));
  EXPECT_TRUE(parse_zero({"--zero", "true"}, false));
  EXPECT_FALSE(parse_zero({"--zero", "false"}, true));
  EXPECT_FALSE(parse_zero({"--zero=false"}, true));
  EXPECT_THROW(parse_zero({"--zero", "maybe"}, false), CLI::ParseError);
}

TEST(BoolFlagTest, ASwitchTakesNoValue) {
  bool quiet = false;
  parse_zero({"--quiet"}, false, &quiet);
  EXPECT_TRUE(quiet);
  parse_zero({}, false, &quiet);
  EXPECT_FALSE(quiet);
}

TEST(BoolFlagTest, HelpShowsTheRealDefault) {
  for (const bool initial : {false, true}) {
    CLI::App app;
    bool zero = initial, quiet = false;
    add_bool_option(app, "--zero", zero, "shard the optimizer");
    add_switch(app, "--quiet", quiet, "no progress line");
    const std::string help = app.help();
    const std::string shown = initial ? "true" : "false";
    EXPECT_NE(help.find("--zero [true|false]"), std::string::npos) << help;
    EXPECT_NE(help.find("shard the optimizer (alone: true; default: " + shown + ")"),
              std::string::npos)
        << help;
    EXPECT_EQ(help.find("=true"), std::string::npos) << help;
    EXPECT_EQ(help.find("BOOLEAN"), std::string::npos) << help;
    EXPECT_NE(help.find("no progress line (default: not given)"), std::string::npos) << help;
  }
}

}  // namespace
}  // namespace dpe::tools
