// dispatch() and the op-table registry: a prim's checks run before any table sees it, an empty
// batch needs no table, in-place updates are versioned whether or not a kernel ran, results come
// back, and a decorator put in place of a device type's table sees every call until it is
// removed.
#include "engine/backend/dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

// Counts the prims it sees and runs them on the table it replaced unless told to skip them.
class CountingTable final : public OpTable {
 public:
  CountingTable(OpTable& inner, bool run_inner) : inner_(inner), run_inner_(run_inner) {}

#define DPE_COUNTING_SLOT(Op)             \
  void run(const prim::Op& op) override { \
    names.push_back(prim::Op::kName);     \
    if (run_inner_) inner_.run(op);       \
  }
  DPE_PRIMS(DPE_COUNTING_SLOT)
#undef DPE_COUNTING_SLOT

  bool has(PrimId id) const override { return inner_.has(id); }
  DTypeSet dtypes(PrimId id) const override { return inner_.dtypes(id); }
  bool channels_last() const override { return inner_.channels_last(); }

  std::vector<std::string> names;

 private:
  OpTable& inner_;
  bool run_inner_;
};

// Installs a CountingTable over the host's table for its scope.
class HostDecorator {
 public:
  explicit HostDecorator(bool run_inner)
      : table(*find_op_table(DeviceType::kHost), run_inner),
        replaced_(replace_op_table(DeviceType::kHost, &table)) {}
  ~HostDecorator() { replace_op_table(DeviceType::kHost, replaced_); }
  CountingTable table;

 private:
  OpTable* replaced_;
};

// What the prims ask the table beside its kernels passes through a decorator: a channels-last
// activation stays so while one is in place.
TEST(DispatchTest, ADecoratorAnswersForTheTableItReplaced) {
  const Tensor nhwc =
      Tensor::empty({2, 3, 4, 5}, DType::kFloat32, Device(), MemoryFormat::kChannelsLast);
  HostDecorator d(/*run_inner=*/true);
  EXPECT_TRUE(find_op_table(DeviceType::kHost)->channels_last());
  EXPECT_EQ(prim::activation_format(nhwc), MemoryFormat::kChannelsLast);
  EXPECT_TRUE(supports<prim::BatchNormReluForwardTrain>(nhwc.device()));
}

TEST(DispatchTest, ChecksRunBeforeTheTableSeesTheCall) {
  HostDecorator d(/*run_inner=*/true);
  Tensor a = Tensor::ones({2, 3}), out = Tensor::empty({2, 3}), wrong = Tensor::empty({3, 2});
  EXPECT_THROW(dispatch(prim::Add{a, a, 1.0f, wrong}), Error);
  EXPECT_TRUE(d.table.names.empty());
  dispatch(prim::Add{a, a, 1.0f, out});
  EXPECT_EQ(d.table.names, std::vector<std::string>{"add"});
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(6, 2.0f));
}

TEST(DispatchTest, AnEmptyBatchNeedsNoTableButStillZeroesTheParameterGradients) {
  HostDecorator d(/*run_inner=*/true);
  Tensor x = Tensor::empty({0, 2, 5, 5}), w = Tensor::ones({3, 2, 3, 3}), b = Tensor::ones({3});
  Tensor y = Tensor::empty({0, 3, 3, 3});
  const Conv2dParams p{1, 0};
  dispatch(prim::Conv2dForward{x, w, b, p, y});
  Tensor gx = Tensor::empty(x.shape()), gw = Tensor::full({3, 2, 3, 3}, 7.0f);
  Tensor gb = Tensor::full({3}, 7.0f);
  dispatch(prim::Conv2dBackward{x, w, y, p, gx, gw, gb});
  EXPECT_TRUE(d.table.names.empty());
  EXPECT_EQ(gw.to_vector<float>(), std::vector<float>(18 * 3, 0.0f));
  EXPECT_EQ(gb.to_vector<float>(), std::vector<float>(3, 0.0f));
}

TEST(DispatchTest, InPlaceUpdatesAreVersionedWhetherOrNotAKernelRan) {
  HostDecorator d(/*run_inner=*/false);
  Tensor p = Tensor::ones({3}), g = Tensor::full({3}, 0.5f), buf = Tensor::zeros({3});
  const uint64_t before = p.version(), buf_before = buf.version();
  const SgdStepParams o{0.1f, 0.9f, 0.0f, 0.0f, false};
  dispatch(prim::SgdStep{p, g, buf, o, true});
  EXPECT_EQ(d.table.names, std::vector<std::string>{"sgd"});
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>(3, 1.0f));  // skipped by the decorator
  EXPECT_GT(p.version(), before);
  EXPECT_GT(buf.version(), buf_before);
}

TEST(DispatchTest, ResultsComeBackAndDefaultWhenNoKernelRuns) {
  const Tensor inf = Tensor::full({3}, INFINITY);
  EXPECT_FALSE(dispatch(prim::AllFinite{inf}));
  EXPECT_TRUE(dispatch(prim::AllFinite{Tensor::ones({3})}));
  HostDecorator d(/*run_inner=*/false);
  EXPECT_TRUE(dispatch(prim::AllFinite{inf}));  // no kernel: the declared default
}

TEST(DispatchTest, ADecoratorSeesCallsOnlyWhileInstalled) {
  Tensor x = Tensor::ones({4}), y = Tensor::empty({4});
  OpTable* original = find_op_table(DeviceType::kHost);
  {
    HostDecorator d(/*run_inner=*/true);
    EXPECT_EQ(find_op_table(DeviceType::kHost), &d.table);
    dispatch(prim::ReluForward{x, y});
    dispatch(prim::ReluForward{x, y});
    EXPECT_EQ(d.table.names.size(), 2u);
    EXPECT_TRUE(supports<prim::BatchNormReluForwardTrain>(Device()));  // has() forwards
  }
  EXPECT_EQ(find_op_table(DeviceType::kHost), original);
  dispatch(prim::ReluForward{x, y});
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST(DispatchTest, AMissingTableAndADoubleRegistrationAreNamed) {
  OpTable* cuda = replace_op_table(DeviceType::kCuda, nullptr);
  try {
    op_table(DeviceType::kCuda, "add");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: no backend is registered for cuda devices");
  }
  EXPECT_FALSE(supports<prim::Add>(Device::parse("cuda:0")));
  replace_op_table(DeviceType::kCuda, cuda);
  OpTable& host = *find_op_table(DeviceType::kHost);
  try {
    register_op_table(DeviceType::kHost, host);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "register_op_table: host already has a table");
  }
}

TEST(DispatchTest, EveryPrimHasADistinctIdAndName) {
  std::vector<std::string> names;
#define DPE_NAME(Op) names.push_back(prim::Op::kName);
  DPE_PRIMS(DPE_NAME)
#undef DPE_NAME
  EXPECT_EQ(names.size(), static_cast<size_t>(PrimId::kCount));
  EXPECT_EQ(prim_id<prim::AdamStep>(), static_cast<PrimId>(static_cast<int>(PrimId::kCount) - 1));
}

}  // namespace
}  // namespace dpe
