// safetensors' BF16 and F16 (engine/io/safetensors.h): files PyTorch wrote (golden/
// make_lowp_golden.py) read with PyTorch's bits, which are also what dpe's Tensor::to gives the
// same float32 values; and dpe's own 16-bit files round-trip bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/device/runtime.h"
#include "engine/io/safetensors.h"

namespace dpe {
namespace {

const Tensor& find(const StateDict& state, const std::string& name) {
  for (const auto& [key, t] : state) {
    if (key == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

template <class T>
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out;
  for (const T& v : t.to_vector<T>()) out.push_back(v.bits);
  return out;
}

TEST(SafetensorsDTypeTest, ReadsPyTorchsBFloat16AndFloat16WithItsRounding) {
  const StateDict golden = load_safetensors("tests/engine/io/golden/lowp_golden.safetensors");
  const Tensor& source = find(golden, "source");
  const Tensor& bf16 = find(golden, "bfloat16");
  const Tensor& f16 = find(golden, "float16");
  ASSERT_EQ(bf16.dtype(), DType::kBFloat16);
  ASSERT_EQ(f16.dtype(), DType::kFloat16);
  ASSERT_EQ(bf16.shape(), source.shape());
  EXPECT_EQ(bits_of<BFloat16>(source.to(DType::kBFloat16)), bits_of<BFloat16>(bf16));
  EXPECT_EQ(bits_of<Float16>(source.to(DType::kFloat16)), bits_of<Float16>(f16));
}

TEST(SafetensorsDTypeTest, SixteenBitTensorsRoundTripBitForBit) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/lowp.safetensors";
  const Tensor x =
      Tensor::from_vector(std::vector<float>{1.0f, -0.5f, 3.14159f, 1e-3f, 60000.0f, 0.0f}, {2, 3});
  const StateDict saved = {{"b", x.to(DType::kBFloat16)}, {"h", x.to(DType::kFloat16)}};
  save_safetensors(path, saved);
  const StateDict loaded = load_safetensors(path);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].second.dtype(), DType::kBFloat16);
  EXPECT_EQ(loaded[1].second.dtype(), DType::kFloat16);
  EXPECT_EQ(bits_of<BFloat16>(loaded[0].second), bits_of<BFloat16>(saved[0].second));
  EXPECT_EQ(bits_of<Float16>(loaded[1].second), bits_of<Float16>(saved[1].second));
  EXPECT_EQ(loaded[0].second.shape(), Shape({2, 3}));
}

}  // namespace
}  // namespace dpe
