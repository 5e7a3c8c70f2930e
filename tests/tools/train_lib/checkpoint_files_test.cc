// The checkpoint set's files (tools/train_lib/checkpoint_files.h): their names, a file's size and
// CRC-32 (zlib's), and a JSON file of the set read with a DataError naming it when it is missing,
// too large or not a JSON object.
#include "tools/train_lib/checkpoint_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::write_file;

// read_json_object's DataError message for `path` ("" when it reads it).
std::string data_error(const std::string& path) {
  try {
    read_json_object(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFilesTest, TheSetsNames) {
  EXPECT_EQ(checkpoint_manifest_path("ck"), "ck/checkpoint.json");
  EXPECT_EQ(model_checkpoint_path("ck"), "ck/model.safetensors");
  EXPECT_EQ(optimizer_checkpoint_path("ck"), "ck/optimizer.safetensors");
  EXPECT_EQ(training_state_path("ck"), "ck/training_state.json");
  EXPECT_EQ(legacy_checkpoint_path("ck"), "ck/checkpoint.safetensors");
  EXPECT_EQ(metrics_path("ck"), "ck/metrics.jsonl");
  EXPECT_EQ(staged_name(kModelFile, 4), "model.safetensors.next.4");
}

TEST(CheckpointFilesTest, SizeAndCrc32OfAFile) {
  const std::string path = tmpdir("crc_check");
  write_file(path, "123456789");
  EXPECT_EQ(file_size(path), 9);
  EXPECT_EQ(file_crc32(path), "cbf43926");  // CRC-32's check value
  write_file(path, "");
  EXPECT_EQ(file_size(path), 0);
  EXPECT_EQ(file_crc32(path), "00000000");
  // Over one 1 MiB piece: the pieces chain.
  write_file(path, std::string((1 << 20) + 3, 'a'));
  EXPECT_EQ(file_size(path), (1 << 20) + 3);
  EXPECT_EQ(file_crc32(path).size(), 8u);
  EXPECT_EQ(file_size(tmpdir("no_such_file")), -1);
  EXPECT_EQ(file_crc32(tmpdir("no_such_file")), "");
  const std::string folder = tmpdir("a_folder");
  ::mkdir(folder.c_str(), 0755);
  EXPECT_EQ(file_size(folder), -1);  // not a regular file
}

TEST(CheckpointFilesTest, AJsonFileOfTheSetIsCheckedBeforeItIsUsed) {
  const std::string path = tmpdir("state.json");
  write_file(path, "{\"epoch\": 3}");
  EXPECT_EQ(read_json_object(path).at("epoch"), 3);
  EXPECT_EQ(data_error(tmpdir("missing.json")),
            "checkpoint '" + tmpdir("missing.json") + "' is missing");
  write_file(path, std::string(kMaxCheckpointJsonBytes + 1, ' '));
  EXPECT_EQ(data_error(path), "checkpoint '" + path + "' is 1048577 bytes, over the 1048576-byte "
                                  "limit (not written by dpe train)");
  write_file(path, "[1, 2]");
  EXPECT_NE(data_error(path).find("is not a JSON object"), std::string::npos) << data_error(path);
}

}  // namespace
}  // namespace dpe::tools
