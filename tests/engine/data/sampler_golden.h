// Test helper: PyTorch 1.13's sampler lists, read from golden/sampler_golden.json (written by
// golden/make_sampler_golden.py; see its docstring for the summary format of long lists).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpe {
namespace testing_golden {

// Relative to the runfiles root, where Bazel runs a test.
inline const nlohmann::json& sampler_golden() {
  static const nlohmann::json golden = [] {
    std::ifstream in("tests/engine/data/golden/sampler_golden.json");
    EXPECT_TRUE(in.good()) << "cannot open tests/engine/data/golden/sampler_golden.json";
    return nlohmann::json::parse(in);
  }();
  return golden;
}

// sum((v + 1) * (i * 0x9E3779B97F4A7C15 + 1)) mod 2^64, as make_sampler_golden.py's checksum().
inline uint64_t list_checksum(const std::vector<int64_t>& values) {
  uint64_t total = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    total += (static_cast<uint64_t>(values[i]) + 1) * (i * 0x9E3779B97F4A7C15ull + 1);
  }
  return total;
}

// Whether `got` is the list `expected` stands for: the whole list, or {len, head, tail, checksum}.
inline ::testing::AssertionResult matches_golden(const nlohmann::json& expected,
                                                 const std::vector<int64_t>& got) {
  if (expected.is_array()) {
    const auto want = expected.get<std::vector<int64_t>>();
    if (want == got) return ::testing::AssertionSuccess();
    auto failure = ::testing::AssertionFailure() << "lists differ (length " << want.size()
                                                 << " expected, " << got.size() << " got)";
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
      if (want[i] != got[i]) {
        return failure << "; first difference at " << i << ": torch " << want[i] << ", dpe "
                       << got[i];
      }
    }
    return failure;
  }
  const size_t len = expected.at("len").get<size_t>();
  if (got.size() != len) {
    return ::testing::AssertionFailure() << "length " << got.size() << ", torch " << len;
  }
  const auto head = expected.at("head").get<std::vector<int64_t>>();
  const auto tail = expected.at("tail").get<std::vector<int64_t>>();
  if (!std::equal(head.begin(), head.end(), got.begin())) {
    return ::testing::AssertionFailure() << "the first " << head.size() << " entries differ";
  }
  if (!std::equal(tail.begin(), tail.end(), got.end() - static_cast<int64_t>(tail.size()))) {
    return ::testing::AssertionFailure() << "the last " << tail.size() << " entries differ";
  }
  if (list_checksum(got) != expected.at("checksum").get<uint64_t>()) {
    return ::testing::AssertionFailure() << "same ends, different checksum";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace testing_golden
}  // namespace dpe
