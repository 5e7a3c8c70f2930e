#include "engine/nn/value.h"

#include <gtest/gtest.h>

namespace dpe {
namespace {

// A nested value: [t0, {"a": t1, "n": 3, "b": [t2]}, "text"].
Value nested(const Tensor& t0, const Tensor& t1, const Tensor& t2) {
  return ValueList{t0, ValueDict{{"a", t1}, {"n", 3}, {"b", ValueList{t2}}}, "text"};
}

TEST(ValueTest, ForEachTensorVisitsDepthFirstInOrder) {
  const Tensor t0 = Tensor::zeros(Shape{1}), t1 = Tensor::zeros(Shape{2}),
               t2 = Tensor::zeros(Shape{3});
  std::vector<int64_t> seen;
  nested(t0, t1, t2).for_each_tensor([&](const Tensor& t) { seen.push_back(t.numel()); });
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3}));

  int calls = 0;
  Value(int64_t{4}).for_each_tensor([&](const Tensor&) { ++calls; });
  Value().for_each_tensor([&](const Tensor&) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ValueTest, MapTensorsKeepsStructureAndPlainValues) {
  const Tensor t0 = Tensor::zeros(Shape{1}), t1 = Tensor::zeros(Shape{2}),
               t2 = Tensor::zeros(Shape{3});
  int next = 0;
  const Value out = nested(t0, t1, t2).map_tensors([&](const Tensor& t) -> Value {
    return Tensor::full(Shape{t.numel() + 10}, static_cast<float>(next++));
  });
  ASSERT_TRUE(out.is_list());
  ASSERT_EQ(out.list().size(), 3u);
  EXPECT_EQ(out.list()[0].tensor().numel(), 11);
  EXPECT_EQ(out.list()[0].tensor().to_vector<float>()[0], 0.0f);
  const Value& d = out.list()[1];
  EXPECT_EQ(d.at("a").tensor().numel(), 12);
  EXPECT_EQ(d.at("a").tensor().to_vector<float>()[0], 1.0f);
  EXPECT_EQ(d.at("n").get<int64_t>(), 3);
  EXPECT_EQ(d.at("b").list()[0].tensor().numel(), 13);
  EXPECT_EQ(out.list()[2].get<std::string>(), "text");
  // Keys keep their insertion order.
  EXPECT_EQ(d.dict()[0].first, "a");
  EXPECT_EQ(d.dict()[2].first, "b");
}

}  // namespace
}  // namespace dpe
