// Helpers for the language-model corpus tests: a scratch directory per test, files, and a small
// English text that trains a tiny tokenizer in well under a second.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace dpe::testing_text {

// $TEST_TMPDIR/<prefix>_<test name>, created empty-ish (tests write distinct names).
inline std::string scratch_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + prefix + "_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The message of the dpe::Error `f` throws; fails the test when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dpe::Error";
  return "";
}

// Sixty short documents of plain English, lines and blank lines included.
inline std::vector<std::string> small_documents() {
  const std::vector<std::string> subjects = {"The cat", "A dog", "My friend", "The old man",
                                             "Every hacker", "The computer"};
  const std::vector<std::string> verbs = {"reads", "writes", "finds", "loses", "likes"};
  const std::vector<std::string> objects = {"a book", "the program", "some bread", "the answer",
                                            "a fortune cookie"};
  std::vector<std::string> docs;
  for (size_t i = 0; i < 60; ++i) {
    const std::string& s = subjects[i % subjects.size()];
    const std::string& v = verbs[(i / 2) % verbs.size()];
    const std::string& o = objects[(i / 3) % objects.size()];
    std::string doc = s + " " + v + " " + o + " every day.\n" + "Then " + s + " " + v +
                      " nothing at all!";
    if (i % 4 == 0) doc += "\n\n-- Anonymous, number " + std::to_string(i);
    docs.push_back(doc);
  }
  return docs;
}

}  // namespace dpe::testing_text
