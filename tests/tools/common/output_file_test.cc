// --json/--svg paths (tools/common/output_file.h): checked before a run, leaving nothing behind;
// written whole through a temporary file that never stays.
#include "tools/common/output_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tools/common/exit_codes.h"

namespace dpe::tools {
namespace {

std::string scratch(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp") + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

std::string usage_error(const std::string& flag, const std::string& path) {
  try {
    check_writable(flag, path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputFileTest, CheckWritableNamesTheFlagThePathAndWhyAndLeavesNothing) {
  const std::string dir = scratch("check");
  EXPECT_EQ(usage_error("--json", dir + "/out.json"), "");
  EXPECT_TRUE(names_in(dir).empty()) << "the probe file was removed";
  std::string msg = usage_error("--json", dir + "/missing/out.json");
  EXPECT_NE(msg.find("--json " + dir + "/missing/out.json: cannot write into " + dir +
                     "/missing: No such file or directory"),
            std::string::npos)
      << msg;
  msg = usage_error("--svg", dir);
  EXPECT_NE(msg.find("--svg " + dir + " is a folder"), std::string::npos) << msg;
  EXPECT_EQ(usage_error("--json", "/dev/null"), "");
}

TEST(OutputFileTest, WritesWholeThroughATemporaryFileThatNeverStays) {
  const std::string dir = scratch("write");
  const std::string path = dir + "/out.json";
  std::ofstream(path) << "old";
  write_file_atomically(path, "{\"new\": true}\n");
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{\"new\": true}\n");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"out.json"});
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  write_file_atomically("/dev/null", "written in place, not renamed over\n");
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_THROW(write_file_atomically(dir + "/missing/out.json", "x"), Error);
}

}  // namespace
}  // namespace dpe::tools
