// The checkpoint set's JSON files from text (tools/train_lib/checkpoint_json.h): what a manifest
// must hold, and every refusal a DataError naming the file and the key. trainer_test covers the
// same checks through train --resume.
#include "tools/train_lib/checkpoint_json.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tools/common/exit_codes.h"

namespace dpe::tools {
namespace {

const char* kManifest = R"({"format": "dpe-checkpoint-1", "generation": 4,
  "files": {"model.safetensors": 10, "optimizer.safetensors": 20, "training_state.json": 30},
  "crc32": {"model.safetensors": "0000000a", "optimizer.safetensors": "0000000b",
            "training_state.json": "0000000c"}})";

std::string data_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return "";
}

TEST(CheckpointJsonTest, AManifestGivesItsGenerationSizesAndChecksums) {
  const CheckpointManifest m = parse_manifest("m.json", parse_checkpoint_json("m.json", kManifest));
  EXPECT_EQ(m.generation, 4);
  EXPECT_EQ(m.sizes.at("optimizer.safetensors"), 20u);
  EXPECT_EQ(m.crc32.at("training_state.json"), "0000000c");
  nlohmann::json old = nlohmann::json::parse(kManifest);
  old.erase("crc32");  // written before checksums were recorded
  EXPECT_TRUE(parse_manifest("m.json", old).crc32.empty());
}

TEST(CheckpointJsonTest, EveryRefusalNamesTheFileAndTheKey) {
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[1, 2]", "is not a JSON object"},
           {"{\"a\": ", "is not a JSON object"},
           {std::string(100, '[') + std::string(100, ']'), "nests deeper than 16 levels"},
           {std::string((1 << 20) + 1, ' '), "over the 1048576-byte limit"}}) {
    const std::string msg = data_error([&, &text = text] { parse_checkpoint_json("x.json", text); });
    EXPECT_NE(msg.find("checkpoint 'x.json'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
  using Edit = std::function<void(nlohmann::json&)>;
  for (const auto& [edit, expected] : std::vector<std::pair<Edit, std::string>>{
           {[](nlohmann::json& j) { j["format"] = "v2"; }, "metadata 'format' is v2"},
           {[](nlohmann::json& j) { j.erase("generation"); }, "has no 'generation' entry"},
           {[](nlohmann::json& j) { j["generation"] = 0; }, "metadata 'generation' is 0"},
           {[](nlohmann::json& j) { j["generation"] = "4"; }, "metadata 'generation'"},
           {[](nlohmann::json& j) { j["files"]["extra"] = 1; }, "metadata 'files' must map"},
           {[](nlohmann::json& j) { j["files"]["model.safetensors"] = -1; },
            "metadata 'files' must map"},
           {[](nlohmann::json& j) { j["crc32"]["model.safetensors"] = 7; },
            "metadata 'crc32' must map model.safetensors"},
           {[](nlohmann::json& j) { j["crc32"] = nullptr; }, "metadata 'crc32' must map"}}) {
    nlohmann::json j = nlohmann::json::parse(kManifest);
    edit(j);
    const std::string msg = data_error([&] { parse_manifest("m.json", j); });
    EXPECT_NE(msg.find("checkpoint 'm.json'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
}

TEST(CheckpointJsonTest, MetadataIntTakesDigitsOnlyAndShownCutsLongValues) {
  EXPECT_EQ(metadata_int("p", "epoch", "12", 0, 99), 12);
  for (const char* bad : {"-1", "1e3", " 1", "", "100", "9999999999999999999999"}) {
    EXPECT_NE(data_error([&] { metadata_int("p", "epoch", bad, 0, 99); }).find("metadata 'epoch'"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(shown("gpt-small"), "gpt-small");
  EXPECT_EQ(shown(std::string(50, 'x')), "'" + std::string(40, 'x') + "...' (50 bytes)");
  EXPECT_EQ(shown("a\nb"), "'a?b'");
}

}  // namespace
}  // namespace dpe::tools
