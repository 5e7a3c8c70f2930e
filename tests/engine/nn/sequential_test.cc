#include "engine/nn/sequential.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/nn/activation.h"
#include "engine/nn/dropout.h"
#include "engine/nn/linear.h"

namespace dpe {
namespace {

TEST(SequentialTest, ReprListsChildrenAndForwardAppliesThemInOrder) {
  nn::Sequential s({std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5f, 1)});
  EXPECT_EQ(s.repr(), "Sequential(\n  (0): ReLU()\n  (1): Dropout(p=0.5)\n)");
  EXPECT_EQ(s.size(), 2u);
  Generator g(3);
  nn::Sequential lin;
  lin.push_back(std::make_shared<nn::Linear>(1, 1, g, /*bias=*/false));
  lin.push_back(std::make_shared<nn::Linear>(1, 1, g, /*bias=*/false));
  lin.find("0.weight").fill_(2.0f);
  lin.find("1.weight").fill_(-3.0f);
  lin.push_back(std::make_shared<nn::ReLU>());  // relu(-6 x): order matters
  EXPECT_EQ(lin(Tensor::from_vector(std::vector<float>{1, -1}, {2, 1})).to_vector<float>(),
            (std::vector<float>{0.0f, 6.0f}));
}

}  // namespace
}  // namespace dpe
