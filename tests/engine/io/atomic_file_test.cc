// AtomicFile (engine/io/atomic_file.h): a target holds its previous bytes or the complete new ones,
// never part of them, when the writer dies between its write and its rename, when the disk is
// full, or when the folder takes no new file; failures name the file and leave no temporary file.
// The crash and the full disk happen in forked children: the one killed at the test seam, the
// other with its file-size limit lowered, so write() fails with EFBIG as on a full disk.
#include "engine/io/atomic_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace dpe {
namespace {

class AtomicFileTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(tmp ? tmp : "/tmp") + "/atomic_file_test_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << templ;
    dir_ = templ;
    path_ = dir_ + "/out.json";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  static bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

  std::vector<std::string> names_in_dir() const {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir_.c_str());
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    return names;
  }

  // Runs `body` in a forked child whose stdout is a pipe; returns what it wrote there and sets
  // `*status` to its wait status. The child ends with _exit(0) after `body`.
  static std::string in_child(const std::function<void(int out)>& body, int* status) {
    int fds[2];
    if (::pipe(fds) != 0) return "pipe failed";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      body(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string said;
    char buffer[512];
    for (ssize_t k; (k = ::read(fds[0], buffer, sizeof buffer)) > 0;) said.append(buffer, k);
    ::close(fds[0]);
    ::waitpid(pid, status, 0);
    return said;
  }

  std::string dir_, path_;
};

TEST_F(AtomicFileTest, ReplacesTheTargetWholeWithMode0644AndNoTemporaryLeft) {
  write_atomically(path_, "first\n");
  EXPECT_EQ(read_file(path_), "first\n");
  write_atomically(path_, "second, longer\n");
  EXPECT_EQ(read_file(path_), "second, longer\n");
  AtomicFileOptions unsynced;
  unsynced.sync = false;
  write_atomically(path_, "", unsynced);
  EXPECT_EQ(read_file(path_), "");
  EXPECT_EQ(names_in_dir(), std::vector<std::string>{"out.json"});
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, StreamsPiecesAndAnUncommittedFileLeavesNothing) {
  write_file(path_, "old");
  {
    AtomicFile file(path_);
    EXPECT_EQ(file.temporary().rfind(path_ + ".tmp.", 0), 0u) << file.temporary();
    EXPECT_EQ(file.temporary().size(), path_.size() + 11);  // ".tmp." and mkstemp's 6 letters
    file.write("new ", 4);
    file.write("bytes", 5);
    EXPECT_EQ(read_file(path_), "old");
    EXPECT_TRUE(exists(file.temporary()));
  }  // not committed: an exception on the way out of a writer
  EXPECT_EQ(read_file(path_), "old");
  EXPECT_EQ(names_in_dir(), std::vector<std::string>{"out.json"});
  AtomicFile file(path_);
  file.write("new ", 4);
  file.write("bytes", 5);
  file.commit();
  EXPECT_EQ(read_file(path_), "new bytes");
  EXPECT_EQ(names_in_dir(), std::vector<std::string>{"out.json"});
}

// (a) The writer killed (SIGKILL) once the temporary file is complete, just before its rename, or
// halfway through writing it: the target keeps its previous bytes, or stays absent.
TEST_F(AtomicFileTest, AWriterKilledBeforeItsRenameLeavesTheTargetAsItWas) {
  const std::string big(1 << 20, 'n');
  for (bool existed : {true, false}) {
    for (bool halfway : {false, true}) {
      ::unlink(path_.c_str());
      if (existed) write_file(path_, "previous");
      int status = 0;
      in_child(
          [&](int) {
            AtomicFileOptions options;
            options.before_rename = [](const std::string&) { ::raise(SIGKILL); };
            AtomicFile file(path_, options);
            file.write(big.data(), halfway ? big.size() / 2 : big.size());
            if (halfway) ::raise(SIGKILL);
            file.commit();
          },
          &status);
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
      if (existed) {
        EXPECT_EQ(read_file(path_), "previous") << halfway;
      } else {
        EXPECT_FALSE(exists(path_)) << halfway;
      }
      // A crash cannot clean up: its temporary file stays beside the target, whole or not.
      for (const std::string& name : names_in_dir()) {
        if (name == "out.json") continue;
        EXPECT_EQ(name.rfind("out.json.tmp.", 0), 0u) << name;
        EXPECT_EQ(read_file(dir_ + "/" + name).size(), halfway ? big.size() / 2 : big.size());
        ::unlink((dir_ + "/" + name).c_str());
      }
    }
  }
  // An exception from the seam aborts the write as a failed rename would: nothing is left.
  AtomicFileOptions options;
  options.before_rename = [](const std::string&) { throw Error("stopped at the rename"); };
  EXPECT_THROW(write_atomically(path_, "new", options), Error);
  EXPECT_FALSE(exists(path_));
  EXPECT_TRUE(names_in_dir().empty());
}

// (b) A full disk: the child's file-size limit is 4 KiB and SIGXFSZ ignored, so the write of
// 64 KiB fails with EFBIG. The error names the file; the target is untouched and the temporary
// file removed.
TEST_F(AtomicFileTest, AFullDiskNamesTheFileAndLeavesTheTargetUntouched) {
  write_file(path_, "previous");
  int status = 0;
  const std::string said = in_child(
      [&](int out) {
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit limit{4096, 4096};
        ::setrlimit(RLIMIT_FSIZE, &limit);
        std::string what = "no error";
        try {
          write_atomically(path_, std::string(64 << 10, 'x'));
        } catch (const AtomicFileError& e) {
          what = std::string(e.step() == AtomicFileStep::kWrite ? "write: " : "other step: ") +
                 e.what();
        }
        (void)!::write(out, what.data(), what.size());
      },
      &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(said.rfind("write: cannot write '" + path_ + ".tmp.", 0), 0u) << said;
  EXPECT_NE(said.find(std::strerror(EFBIG)), std::string::npos) << said;
  EXPECT_EQ(read_file(path_), "previous");
  EXPECT_EQ(names_in_dir(), std::vector<std::string>{"out.json"}) << "temporary file left";
}

// (c) A folder that takes no new file (tests run as root, whom permission bits do not stop): a
// path through a regular file (ENOTDIR) and a read-only filesystem, /proc. The error names the
// path.
TEST_F(AtomicFileTest, AnUnwritableFolderNamesThePath) {
  write_file(dir_ + "/regular", "a file, not a folder");
  const std::string through_file = dir_ + "/regular/out.json";
  try {
    write_atomically(through_file, "x");
    FAIL() << "wrote through a regular file";
  } catch (const AtomicFileError& e) {
    EXPECT_EQ(e.step(), AtomicFileStep::kCreate);
    EXPECT_EQ(e.target(), through_file);
    EXPECT_EQ(e.reason(), std::strerror(ENOTDIR));
    EXPECT_EQ(std::string(e.what()), "cannot create a temporary file next to '" + through_file +
                                         "': " + std::strerror(ENOTDIR));
  }
  EXPECT_EQ(read_file(dir_ + "/regular"), "a file, not a folder");
  const std::string in_proc = "/proc/dpe_atomic_file_test.json";
  try {
    AtomicFile file(in_proc);
    FAIL() << "made a file in /proc";
  } catch (const AtomicFileError& e) {
    EXPECT_EQ(e.step(), AtomicFileStep::kCreate);
    EXPECT_NE(std::string(e.what()).find("'" + in_proc + "'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(in_proc));
}

// A failed rename (the target is a folder) keeps the folder and removes the temporary file.
TEST_F(AtomicFileTest, AFailedRenameRemovesTheTemporaryFile) {
  ASSERT_EQ(::mkdir(path_.c_str(), 0755), 0);
  try {
    write_atomically(path_, "x");
    FAIL() << "renamed over a folder";
  } catch (const AtomicFileError& e) {
    EXPECT_EQ(e.step(), AtomicFileStep::kRename);
    EXPECT_EQ(std::string(e.what()),
              "cannot rename '" + e.temporary() + "' to '" + path_ + "': " + std::strerror(EISDIR));
  }
  EXPECT_EQ(names_in_dir(), std::vector<std::string>{"out.json"});
}

TEST(AtomicFileHelpersTest, WriteAllAndDirectoryOf) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_TRUE(write_all(fds[1], "abc", 3));
  char got[4] = {};
  ASSERT_EQ(::read(fds[0], got, 3), 3);
  EXPECT_STREQ(got, "abc");
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_FALSE(write_all(fds[1], "abc", 3));
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(directory_of("out.json"), ".");
  EXPECT_EQ(directory_of("/out.json"), "/");
  EXPECT_EQ(directory_of("a/b/out.json"), "a/b");
  sync_directory("/nonexistent/folder");  // best effort: nothing to do, nothing thrown
}

}  // namespace
}  // namespace dpe
