#include "engine/io/json_nesting.h"

#include <gtest/gtest.h>

#include <string>

namespace dpe {
namespace {

TEST(JsonNestingTest, CountsObjectsAndArraysNotStrings) {
  EXPECT_EQ(json_nesting_depth("3", 8), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})", 8), 4);
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{\"[[", "b": 1})", 8), 1);
  EXPECT_EQ(json_nesting_depth(R"(["\\", ["x"]])", 8), 2);
}

TEST(JsonNestingTest, StopsPastTheLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(json_nesting_depth(deep, 16), 17);
  EXPECT_EQ(json_nesting_depth(std::string(16, '[') + std::string(16, ']'), 16), 16);
}

}  // namespace
}  // namespace dpe
