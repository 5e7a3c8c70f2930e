#include "engine/io/safetensors.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

using Bytes = std::string;

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    // A fresh folder per test, also outside Bazel (the GPU bundle runs this binary by hand, where
    // /tmp keeps what an earlier run left).
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(tmp ? tmp : "/tmp") + "/safetensors_test_" +
                        testing::UnitTest::GetInstance()->current_test_info()->name() + "_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << templ;
    dir_ = templ;
    path_ = dir_ + "/model.safetensors";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static Bytes read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }
  static void write_file(const std::string& path, const Bytes& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  // A file made of an 8-byte length, `header` and `data`.
  void write_safetensors(const std::string& header, const Bytes& data) const {
    Bytes out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    write_file(path_, out + header + data);
  }

  std::vector<std::string> files_in_dir() const {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir_.c_str());
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.push_back(e->d_name);
      }
    }
    ::closedir(d);
    return names;
  }

  // The message of the dpe::Error loading path_ throws; fails the test when it loads.
  std::string load_error() const {
    try {
      load_safetensors(path_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "the file loaded";
    return "";
  }

  std::string dir_;
  std::string path_;
};

#define EXPECT_MENTIONS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "message: " << (message)

StateDict sample_state() {
  return {{"fc.weight", Tensor::from_vector(std::vector<float>{1, -2, 3.5f, 4, 5, 6}, {2, 3})},
          {"fc.bias", Tensor::from_vector(std::vector<float>{0.25f, -0.5f}, {2})},
          {"bn.num_batches_tracked", Tensor::from_vector(std::vector<int64_t>{42}, Shape{})},
          {"empty", Tensor::zeros({0, 4})},
          {"a.steps", Tensor::from_vector(std::vector<int64_t>{-1, 1LL << 40}, {2})}};
}

TEST_F(SafetensorsTest, RoundTripKeepsNamesOrderShapesDtypesAndValues) {
  const StateDict saved = sample_state();
  save_safetensors(path_, saved);
  const StateDict loaded = load_safetensors(path_);
  ASSERT_EQ(loaded.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    SCOPED_TRACE(saved[i].first);
    EXPECT_EQ(loaded[i].first, saved[i].first);
    const Tensor& a = saved[i].second;
    const Tensor& b = loaded[i].second;
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(b.device(), Device());
    if (a.dtype() == DType::kFloat32) {
      EXPECT_EQ(b.to_vector<float>(), a.to_vector<float>());
    } else {
      EXPECT_EQ(b.to_vector<int64_t>(), a.to_vector<int64_t>());
    }
  }
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(SafetensorsTest, ExactBytesOfATinyFile) {
  save_safetensors(path_, {{"w", Tensor::from_vector(std::vector<float>{1.0f, -2.0f}, {2})},
                           {"n", Tensor::from_vector(std::vector<int64_t>{7}, {1})}});
  const std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("n":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  std::string header = json;
  header.append((8 - header.size() % 8) % 8, ' ');  // padded so the data is 8-byte aligned
  Bytes expected(8, '\0');
  expected[0] = static_cast<char>(header.size());
  expected += header;
  const float w[2] = {1.0f, -2.0f};
  const int64_t n = 7;
  expected.append(reinterpret_cast<const char*>(w), sizeof(w));
  expected.append(reinterpret_cast<const char*>(&n), sizeof(n));
  const Bytes got = read_file(path_);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got.size() % 8, 0u);
  // Little-endian: the float 1.0f is 00 00 80 3f.
  EXPECT_EQ(got.substr(8 + header.size(), 4), Bytes("\x00\x00\x80\x3f", 4));
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  SafetensorsSaveOptions options;
  options.metadata = {{"format", "pt"}, {"epoch", "3"}, {"note", "quotes \" and \\ survive"}};
  save_safetensors(path_, sample_state(), options);
  const SafetensorsContents contents = read_safetensors(path_);
  EXPECT_EQ(contents.metadata, options.metadata);
  EXPECT_EQ(contents.tensors.size(), 5u);
  // Without metadata no "__metadata__" entry is written.
  save_safetensors(path_, sample_state());
  EXPECT_TRUE(read_safetensors(path_).metadata.empty());
  EXPECT_EQ(read_file(path_).find("__metadata__"), std::string::npos);
}

TEST_F(SafetensorsTest, SavesFromAnyDeviceAndViewsAndLoadsOntoAGivenDevice) {
  if (Runtime::get().device_count(DeviceType::kHost) < 2) GTEST_SKIP() << "needs host:1";
  const Device host1 = Device::parse("host:1");
  const Tensor m = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, host1);
  save_safetensors(path_, {{"t", m.permute({1, 0})}, {"row", m.narrow(0, 1, 1)}});
  const StateDict loaded = load_safetensors(path_, host1);
  EXPECT_EQ(loaded[0].second.device(), host1);
  EXPECT_EQ(loaded[0].second.shape(), (Shape{3, 2}));
  EXPECT_EQ(loaded[0].second.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(loaded[1].second.to_vector<float>(), (std::vector<float>{4, 5, 6}));
}

TEST_F(SafetensorsTest, SavesFromAndLoadsOntoCuda) {
  if (Runtime::get().device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device";
  const Device cuda0 = Device::parse("cuda:0");
  const StateDict saved = {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, cuda0)},
                           {"n", Tensor::from_vector(std::vector<int64_t>{5}, Shape{}, cuda0)}};
  save_safetensors(path_, saved);
  const StateDict on_host = load_safetensors(path_);
  EXPECT_EQ(on_host[0].second.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  const StateDict on_cuda = load_safetensors(path_, cuda0);
  EXPECT_EQ(on_cuda[0].second.device(), cuda0);
  EXPECT_EQ(on_cuda[0].second.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(on_cuda[1].second.to_vector<int64_t>(), (std::vector<int64_t>{5}));
}

TEST_F(SafetensorsTest, FailureMidWriteKeepsThePreviousFile) {
  save_safetensors(path_, sample_state());
  const Bytes before = read_file(path_);
  SafetensorsSaveOptions options;
  options.on_tensor_written = [](size_t index, const std::string& name) {
    if (index == 1) throw Error("simulated disk failure after " + name);
  };
  StateDict other = {
      {"x", Tensor::ones({1000})}, {"y", Tensor::ones({1000})}, {"z", Tensor::ones({1000})}};
  try {
    save_safetensors(path_, other, options);
    FAIL() << "the save did not fail";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "simulated disk failure after y");
  }
  EXPECT_EQ(read_file(path_), before);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"model.safetensors"}) << "temp file left";
  // A failure before the first byte (a bad state dict) also leaves it alone.
  EXPECT_THROW(save_safetensors(path_, {{"x", Tensor()}}), Error);
  EXPECT_THROW(save_safetensors(path_, {{"x", Tensor::ones({1})}, {"x", Tensor::ones({1})}}),
               Error);
  EXPECT_EQ(read_file(path_), before);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(SafetensorsTest, SaveErrorsNameTheFile) {
  try {
    save_safetensors(dir_ + "/no/such/dir/m.safetensors", sample_state());
    FAIL();
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), dir_ + "/no/such/dir/m.safetensors");
  }
  try {
    save_safetensors(path_, {{"__metadata__", Tensor::ones({1})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "reserved");
  }
}

TEST_F(SafetensorsTest, MissingAndTooShortFiles) {
  EXPECT_MENTIONS(load_error(), path_ + ": No such file");
  write_file(path_, "abc");
  EXPECT_MENTIONS(load_error(), "too short for the 8-byte header length");
}

TEST_F(SafetensorsTest, TruncatedFiles) {
  save_safetensors(path_, sample_state());
  const Bytes full = read_file(path_);
  // Cut inside the data: the last tensor's offsets reach past the end.
  write_file(path_, full.substr(0, full.size() - 4));
  std::string msg = load_error();
  EXPECT_MENTIONS(msg, path_);
  EXPECT_MENTIONS(msg, "tensor 'a.steps'");
  EXPECT_MENTIONS(msg, "reach past the data section");
  // Cut inside the header.
  write_file(path_, full.substr(0, 40));
  msg = load_error();
  EXPECT_MENTIONS(msg, path_);
  EXPECT_MENTIONS(msg, "is larger than the 32 bytes after it");
}

TEST_F(SafetensorsTest, HeaderLengthCap) {
  Bytes data(8, '\0');
  data[4] = 1;  // 2^32 bytes of header
  write_file(path_, data + "{}");
  EXPECT_MENTIONS(load_error(), "exceeds the 104857600-byte limit");
}

TEST_F(SafetensorsTest, InvalidHeaders) {
  struct Case {
    std::string header;
    Bytes data;
    std::string expected;
  };
  const Bytes eight(8, '\0');
  const std::vector<Case> cases = {
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", eight, "not valid JSON"},
      {R"([1, 2])", "", "must be a JSON object"},
      {R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", eight,
       "tensor 'a': dtype F64 is not supported"},
      {R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", eight,
       "tensor 'a': missing string dtype"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight,
       "tensor 'a': shape [-2] must hold non-negative integers"},
      {R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", eight,
       "must hold non-negative integers"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", eight,
       "tensor 'a': data_offsets must be two non-negative integers"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", eight,
       "end before they begin"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight,
       "tensor 'a': data_offsets [0, 8] hold 8 bytes but shape [3] of F32 needs 12"},
      {R"({"a": {"dtype": "I64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
       eight, "needs more than 2^64"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
       R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       eight, "tensor 'b': data_offsets [4, 8] overlap those of tensor 'a' [0, 8]"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
       R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       eight, "tensor 'a' appears twice"},
      {R"({"__metadata__": {"epoch": 3}})", "", "__metadata__ must map strings to strings"},
      {R"({"__metadata__": "x"})", "", "__metadata__ must be an object"},
      {R"({"a": 5})", "", "tensor 'a': expected an object"},
      // Hostile headers: nesting deep enough to overflow the stack of the parser and
      // of the messages; unbounded values printed into messages; sizes whose product overflows
      // once a zero size stops hiding it.
      {"{\"a\": " + std::string(65000, '[') + std::string(65000, ']') + "}", "",
       "the header nests deeper than 8 levels"},
      {R"({"a": {"dtype": "F32", "shape": [[[[[[1]]]]]], "data_offsets": [0, 8]}})", eight,
       "shape an array of 1 elements must hold"},
      {R"({"a": ")" + std::string(5000, 'x') + R"("})", "",
       "expected an object, got a string of 5000"},
      {R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 3, 0], "data_offsets": [0, 0]}})",
       "", "tensor 'a': shape torch.Size([4611686018427387904, 3, 0]) is too large"},
      {R"({"a": {"dtype": "F32", "shape": [0, 4611686018427387904, 4611686018427387904],)"
       R"( "data_offsets": [0, 0]}})",
       "", "is too large: the product of its sizes overflows int64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    write_safetensors(c.header, c.data);
    const std::string msg = load_error();
    EXPECT_MENTIONS(msg, path_);
    EXPECT_MENTIONS(msg, c.expected);
  }
}

TEST_F(SafetensorsTest, ReadsHeadersOtherWritersProduce) {
  // Sorted keys, pretty whitespace, data not in header order, and empty tensors sharing an
  // offset, as Python's safetensors may write them.
  const std::string header = R"({
    "__metadata__": {"format": "pt"},
    "a": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]},
    "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    "c": {"dtype": "F32", "shape": [0], "data_offsets": [12, 12]},
    "d": {"dtype": "I64", "shape": [0, 3], "data_offsets": [12, 12]}})";
  Bytes data(12, '\0');
  const float b = 2.5f;
  const int64_t a = -9;
  std::memcpy(&data[0], &b, 4);
  std::memcpy(&data[4], &a, 8);
  write_safetensors(header, data);
  const SafetensorsContents got = read_safetensors(path_);
  ASSERT_EQ(got.tensors.size(), 4u);
  EXPECT_EQ(got.tensors[0].first, "b");  // data order
  EXPECT_EQ(got.tensors[0].second.to_vector<float>(), std::vector<float>{2.5f});
  EXPECT_EQ(got.tensors[1].first, "a");
  EXPECT_EQ(got.tensors[1].second.to_vector<int64_t>(), std::vector<int64_t>{-9});
  EXPECT_EQ(got.tensors[2].first, "c");
  EXPECT_EQ(got.tensors[3].second.shape(), (Shape{0, 3}));
  EXPECT_EQ(got.metadata.at("format"), "pt");
}

}  // namespace
}  // namespace dpe
