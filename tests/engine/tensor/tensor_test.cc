#include "engine/tensor/tensor.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

const Device kHost0 = Device::parse("host:0");
const Device kHost1 = Device::parse("host:1");

std::vector<float> iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(ShapeTest, PrintsLikePyTorch) {
  EXPECT_EQ(Shape({15, 5}).str(), "torch.Size([15, 5])");
  EXPECT_EQ(Shape{}.str(), "torch.Size([])");
  EXPECT_EQ(Shape({2, 3, 4}).numel(), 24);
  EXPECT_EQ(Shape({2, 3, 4})[-1], 4);
  EXPECT_THROW(Shape({2, 3})[2], Error);
}

TEST(TensorTest, FactoriesAllocateOnTheirDevice) {
  Tensor t = Tensor::zeros({3, 4}, DType::kFloat32, kHost1);
  EXPECT_EQ(t.device(), kHost1);
  EXPECT_EQ(t.nbytes(), 48u);
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor l = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  EXPECT_EQ(l.dtype(), DType::kInt64);
  EXPECT_EQ(l.to_vector<int64_t>()[2], 3);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2}, {3}), Error);
}

TEST(TensorTest, StorageIsAccountedByItsDeviceAllocator) {
  Allocator& a = Runtime::get().context(kHost1).allocator();
  const int64_t before = a.stats().current_bytes;
  {
    Tensor t = Tensor::empty({256}, DType::kFloat32, kHost1);
    EXPECT_EQ(a.stats().current_bytes, before + 1024);
    Tensor view = t.narrow(0, 10, 20);  // a view allocates nothing
    EXPECT_EQ(a.stats().current_bytes, before + 1024);
  }
  EXPECT_EQ(a.stats().current_bytes, before);
}

TEST(TensorTest, StorageKeepsItsMemoryCategoryAndARetagMovesItsBytes) {
  Allocator& a = Runtime::get().context(kHost1).allocator();
  auto held = [&](MemoryCategory c) {
    return a.stats().current_by_category[static_cast<size_t>(c)];
  };
  const int64_t acts = held(MemoryCategory::kActivations), grads = held(MemoryCategory::kGradients);
  {
    Tensor t;
    {
      MemoryCategoryScope scope(MemoryCategory::kActivations);
      t = Tensor::zeros({256}, DType::kFloat32, kHost1);
    }
    EXPECT_EQ(t.memory_category(), MemoryCategory::kActivations);
    EXPECT_EQ(held(MemoryCategory::kActivations), acts + 1024);
    t.narrow(0, 0, 4).set_memory_category(MemoryCategory::kGradients);  // the whole storage
    EXPECT_EQ(held(MemoryCategory::kActivations), acts);
    EXPECT_EQ(held(MemoryCategory::kGradients), grads + 1024);
  }
  EXPECT_EQ(held(MemoryCategory::kGradients), grads);  // freed under its last category
}

TEST(TensorTest, ToCopiesAcrossHostDevicesAndCountsBytesPerPair) {
  Runtime& rt = Runtime::get();
  rt.reset_copy_stats();
  Tensor a = Tensor::from_vector(iota(6), {2, 3}, kHost0);
  Tensor b = a.to(kHost1);
  EXPECT_EQ(b.device(), kHost1);
  EXPECT_FALSE(b.shares_storage(a));
  EXPECT_EQ(b.to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(rt.copied_bytes(kHost0, kHost1), 24);
  EXPECT_EQ(rt.copied_bytes(kHost1, kHost0), 0);
  Tensor c = b.to(kHost0);
  EXPECT_EQ(rt.copied_bytes(kHost1, kHost0), 24);
  EXPECT_TRUE(a.to(kHost0).is_same(a));  // same device: no copy, like PyTorch
  EXPECT_EQ(rt.copied_bytes(kHost0, kHost0), 0);
  // A strided view is packed on the way.
  Tensor col = a.narrow(1, 1, 1).to(kHost1);
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{1, 4}));
  EXPECT_EQ(rt.copied_bytes(kHost0, kHost1), 24 + 8);
}

TEST(TensorTest, NarrowChunkSplitAreViewsSharingStorage) {
  Tensor a = Tensor::from_vector(iota(30), {10, 3});
  Tensor n = a.narrow(0, 2, 3);
  EXPECT_TRUE(n.shares_storage(a));
  EXPECT_EQ(n.shape(), Shape({3, 3}));
  EXPECT_EQ(n.to_vector<float>()[0], 6.0f);
  n.fill_(-1.0f);
  EXPECT_EQ(a.to_vector<float>()[6], -1.0f);  // writes through the view
  EXPECT_THROW(a.narrow(0, 8, 3), Error);
}

std::vector<int64_t> chunk_sizes(int64_t n, int64_t k) {
  std::vector<int64_t> sizes;
  for (const Tensor& c : Tensor::zeros({n, 2}).chunk(k, 0)) sizes.push_back(c.size(0));
  return sizes;
}

TEST(TensorTest, ChunkSizesFollowTorchChunk) {
  EXPECT_EQ(chunk_sizes(30, 2), (std::vector<int64_t>{15, 15}));
  EXPECT_EQ(chunk_sizes(10, 3), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));  // only 3 pieces
  EXPECT_EQ(chunk_sizes(10, 2), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(chunk_sizes(1, 4), (std::vector<int64_t>{1}));
  EXPECT_EQ(chunk_sizes(6, 4), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk_sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));  // torch.chunk on an empty dim
  EXPECT_THROW(Tensor::zeros({3}).chunk(0), Error);
}

TEST(TensorTest, SplitWithSizes) {
  Tensor a = Tensor::from_vector(iota(10), {10});
  auto parts = a.split_with_sizes({3, 7});
  EXPECT_EQ(parts[1].to_vector<float>()[0], 3.0f);
  EXPECT_THROW(a.split_with_sizes({3, 3}), Error);
}

TEST(TensorTest, ViewReshapePermuteContiguous) {
  Tensor a = Tensor::from_vector(iota(6), {2, 3});
  Tensor v = a.view({3, -1});
  EXPECT_EQ(v.shape(), Shape({3, 2}));
  EXPECT_TRUE(v.shares_storage(a));
  Tensor p = a.permute({1, 0});
  EXPECT_TRUE(p.shares_storage(a));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_THROW(p.view({6}), Error);
  Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(p.reshape({6}).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(a.view({4, -1}), Error);
  EXPECT_THROW(a.permute({0, 0}), Error);
  EXPECT_EQ(Tensor::zeros({2, 3, 4}).flatten(1).shape(), Shape({2, 12}));
}

TEST(TensorTest, CloneIsDeepAndCopyIsChecked) {
  Tensor a = Tensor::from_vector(iota(4), {4});
  Tensor b = a.clone();
  b.fill_(7.0f);
  EXPECT_EQ(a.to_vector<float>()[0], 0.0f);
  Tensor c = Tensor::zeros({4}, DType::kFloat32, kHost1);
  c.copy_(a);
  EXPECT_EQ(c.to_vector<float>(), a.to_vector<float>());
  try {
    c.copy_(Tensor::zeros({5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("torch.Size([5])"), std::string::npos) << e.what();
  }
}

TEST(TensorTest, ItemAndErrors) {
  EXPECT_EQ(Tensor::scalar(2.5f).item(), 2.5f);
  EXPECT_THROW(Tensor::zeros({2}).item(), Error);
  EXPECT_THROW(Tensor().shape(), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::kInt64).data<float>(), Error);
}

TEST(TensorTest, DeviceMismatchErrorNamesBothDevices) {
  try {
    check_same_device("add", Tensor::zeros({1}, DType::kFloat32, kHost0),
                      Tensor::zeros({1}, DType::kFloat32, kHost1));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("add"), std::string::npos);
    EXPECT_NE(msg.find("host:0 and host:1"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace dpe

namespace dpe {
namespace {

TEST(MemoryFormatTest, ChannelsLastIsAnNhwcBufferSeenAsNchw) {
  const Tensor x = Tensor::from_vector(
      [] {
        std::vector<float> v(2 * 3 * 2 * 2);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
        return v;
      }(),
      {2, 3, 2, 2});
  EXPECT_EQ(x.suggest_memory_format(), MemoryFormat::kContiguous);
  EXPECT_FALSE(x.is_contiguous(MemoryFormat::kChannelsLast));
  const Tensor cl = x.contiguous(MemoryFormat::kChannelsLast);
  EXPECT_EQ(cl.shape(), x.shape());
  EXPECT_EQ(cl.strides(), (std::vector<int64_t>{12, 1, 6, 3}));  // PyTorch's for [2, 3, 2, 2]
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::kChannelsLast));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::kChannelsLast);
  EXPECT_EQ(cl.to_vector<float>(), x.to_vector<float>());  // the same values, read as NCHW
  // The buffer itself is NHWC: element (n, c, h, w) at n*12 + h*6 + w*3 + c.
  EXPECT_EQ(cl.data<float>()[0 * 12 + 1 * 6 + 0 * 3 + 2], 2 * 4 + 1 * 2 + 0.0f);
  EXPECT_TRUE(cl.contiguous(MemoryFormat::kChannelsLast).is_same(cl));  // already so: no copy
  EXPECT_EQ(cl.contiguous().strides(), (std::vector<int64_t>{12, 4, 2, 1}));
  EXPECT_EQ(cl.contiguous().to_vector<float>(), x.to_vector<float>());
}

TEST(MemoryFormatTest, OneChannelIsBothAndItsStridesSayWhichItWas) {
  const Tensor x = Tensor::zeros({4, 1, 3, 3});
  EXPECT_TRUE(x.is_contiguous(MemoryFormat::kChannelsLast));
  EXPECT_EQ(x.suggest_memory_format(), MemoryFormat::kContiguous);
  const Tensor cl =
      Tensor::empty({4, 1, 3, 3}, DType::kFloat32, Device(), MemoryFormat::kChannelsLast);
  EXPECT_TRUE(cl.is_contiguous());
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::kChannelsLast);
  // Asked for channels last, a one-channel NCHW image is restrided so that its strides say it
  // (torch's x.to(memory_format=channels_last)); the values are the same.
  const Tensor restrided = x.contiguous(MemoryFormat::kChannelsLast);
  EXPECT_EQ(restrided.suggest_memory_format(), MemoryFormat::kChannelsLast);
  EXPECT_EQ(restrided.strides(), (std::vector<int64_t>{9, 1, 3, 1}));
  EXPECT_TRUE(restrided.contiguous(MemoryFormat::kChannelsLast).is_same(restrided));
  EXPECT_TRUE(x.contiguous(MemoryFormat::kContiguous).is_same(x));
  // As PyTorch's: NC11 made channels last says so; N111's equal strides are ambiguous.
  EXPECT_EQ(Tensor::empty({4, 5, 1, 1}, DType::kFloat32, Device(), MemoryFormat::kChannelsLast)
                .suggest_memory_format(),
            MemoryFormat::kChannelsLast);
  EXPECT_EQ(Tensor::zeros({4, 1, 1, 1}).suggest_memory_format(), MemoryFormat::kContiguous);
}

TEST(MemoryFormatTest, ToAnotherDeviceKeepsTheLayoutAsked) {
  const Tensor x = Tensor::from_vector(std::vector<float>(2 * 4 * 3 * 5, 1.5f), {2, 4, 3, 5});
  const Tensor cl = x.to(Device::parse("host:1"), MemoryFormat::kChannelsLast);
  EXPECT_EQ(cl.device(), Device::parse("host:1"));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::kChannelsLast));
  EXPECT_EQ(cl.to_vector<float>(), x.to_vector<float>());
  const Tensor back = cl.to(Device::parse("host:0"), MemoryFormat::kContiguous);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
}

TEST(MemoryFormatTest, ChannelsLastNeedsFourDims) {
  EXPECT_THROW(Tensor::empty({2, 3}, DType::kFloat32, Device(), MemoryFormat::kChannelsLast),
               Error);
  EXPECT_THROW(Tensor::zeros({2, 3}).contiguous(MemoryFormat::kChannelsLast), Error);
  EXPECT_FALSE(Tensor::zeros({2, 3}).is_contiguous(MemoryFormat::kChannelsLast));
  EXPECT_EQ(Tensor::zeros({2, 3}).suggest_memory_format(), MemoryFormat::kContiguous);
}

// --- 16-bit floats ---

TEST(TensorDTypeTest, ToConvertsWithRoundToNearestEvenAndBack) {
  const std::vector<float> values = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f};
  const Tensor x = Tensor::from_vector(values, {2, 2});
  const Tensor b = x.to(DType::kBFloat16);
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_EQ(b.shape(), x.shape());
  EXPECT_EQ(b.nbytes(), 8u);
  std::vector<uint16_t> bits;
  for (BFloat16 v : b.to_vector<BFloat16>()) bits.push_back(v.bits);
  EXPECT_EQ(bits, (std::vector<uint16_t>{0x3f80, 0x3f80, 0x3f82, 0xc020}));
  EXPECT_EQ(b.to(DType::kFloat32).to_vector<float>(),
            (std::vector<float>{1.0f, 1.0f, 1.0f + 2 * 0x1p-7f, -2.5f}));
  EXPECT_TRUE(b.to(DType::kBFloat16).is_same(b));  // already of the dtype: itself
  const Tensor h = x.to(DType::kFloat16);
  EXPECT_EQ(h.to(DType::kFloat32).to_vector<float>()[3], -2.5f);
  EXPECT_EQ(Tensor::from_vector(std::vector<float>{2.9f, -2.9f}, {2})
                .to(DType::kInt64)
                .to_vector<int64_t>(),
            (std::vector<int64_t>{2, -2}));  // truncated, as PyTorch's
  EXPECT_EQ(Tensor::from_vector(std::vector<int64_t>{3, -7}, {2}).to(DType::kBFloat16)
                .to(DType::kFloat32)
                .to_vector<float>(),
            (std::vector<float>{3.0f, -7.0f}));
}

TEST(TensorDTypeTest, ToKeepsADenseLayoutAndGathersAStridedView) {
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 2, 2});
  const Tensor nhwc = x.contiguous(MemoryFormat::kChannelsLast);
  const Tensor b = nhwc.to(DType::kBFloat16);
  EXPECT_EQ(b.strides(), nhwc.strides());
  EXPECT_EQ(b.to(DType::kFloat32).contiguous().to_vector<float>(), x.to_vector<float>());
  const Tensor column = x.view({4, 2}).narrow(1, 1, 1);  // not dense: gathered contiguous
  const Tensor c = column.to(DType::kFloat16);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{1, 3, 5, 7}));
}

TEST(TensorDTypeTest, FillCopyItemAndGradientsOfSixteenBitTensors) {
  Tensor b = Tensor::empty({3}, DType::kBFloat16);
  b.fill_(1.0f / 3.0f);
  EXPECT_EQ(b.to_vector<BFloat16>()[2].bits, to_bfloat16(1.0f / 3.0f).bits);
  Tensor h = Tensor::zeros({3}, DType::kFloat16);
  EXPECT_EQ(h.to_vector<Float16>()[0].bits, 0);
  h.copy_(Tensor::from_vector(std::vector<float>{0.5f, 65504.0f, 1e6f}, {3}));  // copy_ converts
  EXPECT_EQ(h.to(DType::kFloat32).to_vector<float>(),
            (std::vector<float>{0.5f, 65504.0f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(Tensor::full({}, 0.1f).to(DType::kBFloat16).item(), to_float(to_bfloat16(0.1f)));
  EXPECT_THROW(Tensor::zeros({1}, DType::kInt64).item(), Error);
  b.requires_grad_();
  EXPECT_TRUE(b.requires_grad());
  try {
    Tensor::zeros({1}, DType::kInt64).requires_grad_();
    FAIL() << "an int64 tensor required gradients";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("floating-point"), std::string::npos) << e.what();
  }
  try {
    b.to_vector<float>();
    FAIL() << "to_vector<float> read a bfloat16 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype bfloat16"), std::string::npos) << e.what();
  }
  EXPECT_NE(b.str().find("dtype=bfloat16"), std::string::npos) << b.str();
}

TEST(TensorDTypeTest, ConvertsOnEveryHostDevice) {
  Runtime& rt = Runtime::get();
  if (rt.device_count(DeviceType::kHost) < 2) GTEST_SKIP() << "one host device";
  const Device d1 = Device::parse("host:1");
  const Tensor x = Tensor::from_vector(std::vector<float>{1.5f, -3.0f}, {2}, d1);
  const Tensor b = x.to(DType::kBFloat16);
  EXPECT_EQ(b.device(), d1);
  EXPECT_EQ(b.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{1.5f, -3.0f}));
}

}  // namespace
}  // namespace dpe
