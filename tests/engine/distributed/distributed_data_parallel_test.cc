// DistributedDataParallel with 2 and 3 ranks in separate processes on 127.0.0.1, one host device
// each: one DDP step equals one single-process step on the global batch (Mlp, ConvNet without BN;
// default buckets and several buckets as views), bucket 0's all-reduce launched before backward
// ended, find_unused_parameters, no_sync, the checks at construction, the unfinished-reduction
// error, and a rank lost in the middle of backward.
#include "engine/distributed/distributed_data_parallel.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "engine/distributed/spawn.h"
#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/optim/sgd.h"
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/toy_mp_model.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

using distributed::spawn;
using distributed::TCPStore;
using std::chrono::milliseconds;
using test::error_of;
using test::join_job;
using test::rel_error;

constexpr int64_t kGlobalBatch = 12;

Tensor labels(int64_t n, Generator& gen) {
  std::vector<int64_t> v(n);
  for (auto& l : v) l = static_cast<int64_t>(gen.next_u64() % 10);
  return Tensor::from_vector(v, Shape{n});
}

struct Step {
  float loss = 0;
  std::vector<std::vector<float>> grads, params;
};

optim::SgdOptions sgd_options() {
  optim::SgdOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  return o;
}

using Loss = std::function<Tensor(const Tensor& output, const Tensor& target)>;
Tensor classification_loss(const Tensor& out, const Tensor& y) {
  return ops::cross_entropy(out, y);
}

// One SGD step of `model` on (x, y); `params_of` is the unwrapped module.
Step sgd_step(Module& model, Module& params_of, const Tensor& x, const Tensor& y, bool average,
              const Loss& loss_fn = classification_loss) {
  optim::SGD sgd(params_of.parameters(), sgd_options());
  Tensor loss = loss_fn(model(x), y);
  backward(loss);
  Step s;
  s.loss = average ? distributed::reduce_value(loss.detach().clone()).item() : loss.item();
  for (const Tensor& p : params_of.parameters()) s.grads.push_back(p.grad().to_vector<float>());
  sgd.step();
  for (const Tensor& p : params_of.parameters()) s.params.push_back(p.to_vector<float>());
  return s;
}

void expect_same(const Step& ddp, const Step& single, const std::string& what) {
  RANK_CHECK(std::abs(ddp.loss - single.loss) <= 1e-5 * std::abs(single.loss),
             what << ": loss " << ddp.loss << " vs " << single.loss);
  RANK_CHECK(ddp.grads.size() == single.grads.size(), what);
  for (size_t i = 0; i < single.grads.size(); ++i) {
    const double eg = rel_error(ddp.grads[i], single.grads[i]);
    RANK_CHECK(eg < 1e-5, what << ": gradient " << i << " relative error " << eg);
    const double ep = rel_error(ddp.params[i], single.params[i]);
    RANK_CHECK(ep < 1e-5, what << ": parameter " << i << " relative error " << ep);
  }
}

using MakeModel = std::function<std::shared_ptr<Module>(Generator&)>;

// Every rank starts from its own initialisation (seed 100 + rank): DDP must take rank 0's.
// The global batch (inputs, targets) of kGlobalBatch samples.
using MakeBatch = std::function<std::pair<Tensor, Tensor>(Generator&)>;

// `in_place`: the gradients that the ops write straight into their buckets under
// gradient_as_bucket_view (design note "gradient destinations", engine/autograd/node.h).
void run_equivalence(int n, const MakeModel& make, const MakeBatch& make_batch, size_t in_place,
                     const Loss& loss_fn = classification_loss) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, n);
        Generator data(7);
        const auto [x, y] = make_batch(data);
        Generator g0(100);
        auto single_model = make(g0);
        const Step single = sgd_step(*single_model, *single_model, x, y, false, loss_fn);

        const int64_t local = kGlobalBatch / n;
        Tensor xs = x.narrow(0, rank * local, local).contiguous();
        Tensor ys = y.narrow(0, rank * local, local).contiguous();
        for (bool as_view : {false, true}) {
          Generator gr(100 + rank);
          auto model = make(gr);
          DistributedDataParallelOptions o;
          o.gradient_as_bucket_view = as_view;
          // Several buckets for the Mlp (the ConvNet's 118 KiB fit in the first, 1 MiB, bucket).
          if (as_view) o.bucket_cap_mb = 0.01;
          DistributedDataParallel ddp(model, group, o);
          const Step step = sgd_step(ddp, *model, xs, ys, true, loss_fn);
          expect_same(step, single, as_view ? "views, small buckets" : "defaults");
          const BackwardTrace trace = ddp.backward_trace();
          RANK_CHECK(trace.finished, "");
          RANK_CHECK(trace.launches.size() == ddp.bucket_parameter_names().size(), "");
          RANK_CHECK(trace.written_in_place == (as_view ? in_place : 0),
                     trace.written_in_place << " gradients written in place");
        }
        distributed::destroy_process_group();
      },
      n);
}

MakeBatch images(const Shape& sample) {
  return [sample](Generator& data) {
    std::vector<int64_t> dims{kGlobalBatch};
    for (int64_t d : sample) dims.push_back(d);
    Tensor x = randn(Shape(dims), data);
    return std::make_pair(x, labels(kGlobalBatch, data));
  };
}

class DdpEquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(DdpEquivalenceTest, MlpStepEqualsOneProcessOnTheGlobalBatch) {
  run_equivalence(
      GetParam(), [](Generator& g) { return std::make_shared<models::Mlp>(g); }, images({784}),
      6);  // every weight and bias: linear layers
}

TEST_P(DdpEquivalenceTest, ConvNetStepEqualsOneProcessOnTheGlobalBatch) {
  run_equivalence(
      GetParam(), [](Generator& g) { return std::make_shared<models::ConvNet>(g, false); },
      images({1, 28, 28}), 2);  // the classifier's weight and bias; convolutions write their own
}

// The language model: int64 tokens, the loss over [B, T, V], the tied embedding's two gradients.
TEST_P(DdpEquivalenceTest, GptStepEqualsOneProcessOnTheGlobalBatch) {
  models::GptConfig c = models::gpt_config("gpt-small");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 50;
  run_equivalence(
      GetParam(), [c](Generator& g) { return std::make_shared<models::Gpt>(c, g); },
      [](Generator& data) {
        std::vector<int64_t> ids(kGlobalBatch * 9);
        for (auto& t : ids) t = static_cast<int64_t>(data.next_u64() % 50);
        const Tensor all = Tensor::from_vector(ids, {kGlobalBatch, 9});
        return std::make_pair(all.narrow(1, 0, 8).contiguous(), all.narrow(1, 1, 8).contiguous());
      },
      // The Conv1D biases; their weights reach the linear through a transpose, and the tied
      // embedding gets two gradients.
      8, [](const Tensor& logits, const Tensor& t) { return models::lm_loss(logits, t); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalenceTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Seed 004's "DDP and model parallelism": each rank owns two host devices and a ToyMpModel split
// across them; DDP takes no device_ids, buckets each device's gradients apart, and one step of 2
// ranks equals one process on the global batch.
TEST(DdpModelParallelTest, TwoRanksOfTwoDevicesEqualOneProcessOnTheGlobalBatch) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        set_host_device_count(2);  // join_job leaves one
        const Device h0 = Device::parse("host:0"), h1 = Device::parse("host:1");
        Generator data(7);
        const Tensor x = randn({kGlobalBatch, 10}, data), y = randn({kGlobalBatch, 5}, data);
        const Loss mse = [](const Tensor& out, const Tensor& t) {
          return ops::mse_loss(out, t.to(out.device()));
        };
        Generator g0(100);
        auto single_model = std::make_shared<models::ToyMpModel>(h0, h0, g0);
        const Step single = sgd_step(*single_model, *single_model, x, y, false, mse);

        Generator gr(100 + rank);
        auto model = std::make_shared<models::ToyMpModel>(h0, h1, gr);
        DistributedDataParallelOptions o;
        o.bucket_cap_mb = 1;  // one bucket would hold all 165 parameters; devices split it
        DistributedDataParallel ddp(model, group, o);
        const int64_t local = kGlobalBatch / 2;
        const Step step = sgd_step(ddp, *model, x.narrow(0, rank * local, local).contiguous(),
                                   y.narrow(0, rank * local, local).contiguous(), true, mse);
        expect_same(step, single, "ToyMpModel on two devices per rank");
        RANK_CHECK(ddp.bucket_parameter_names().size() == 2,
                   "one bucket per device, got " << ddp.bucket_parameter_names().size());
        RANK_CHECK(model->find("net2.weight").grad().device() == h1, "");
        {
          NoGradGuard no_grad;
          RANK_CHECK(ddp(Tensor::ones({2, 10})).device() == h1, "the output stays on dev1");
        }

        // device_ids make no sense for a module on two devices: PyTorch's error.
        DistributedDataParallelOptions bad;
        bad.device_ids = {h0};
        const std::string e = error_of([&] { DistributedDataParallel(model, group, bad); });
        RANK_CHECK(e.find("only work with single-device modules") != std::string::npos &&
                       e.find("{host:0, host:1}") != std::string::npos,
                   e);
        distributed::destroy_process_group();
      },
      2);
}

// Several buckets: bucket 0 (the last layer's parameters) is launched while backward still has
// the first layers' gradients to compute: fewer hooks had fired than the backward fires in all.
// The claims are about order (how many gradient hooks had fired at each launch), never about
// time; the rendezvous and Gloo timeouts are generous so a loaded machine (ASan, TSan, a busy CI)
// cannot fail it: join_job's default of 5 s is too short there.
TEST(DdpBucketsTest, FirstBucketLaunchesBeforeBackwardEnds) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2, std::chrono::minutes(2));
        Generator g(1);
        auto model = std::make_shared<models::Mlp>(g);
        DistributedDataParallelOptions o;
        o.bucket_cap_mb = 0.001;
        DistributedDataParallel ddp(model, group, o);
        // Reverse registration order; the first bucket closes at 1 MiB (layers.3.weight's 1 MiB).
        const std::vector<std::vector<std::string>> expected{
            {"layers.5.bias", "layers.5.weight", "layers.3.bias", "layers.3.weight"},
            {"layers.1.bias"},
            {"layers.1.weight"}};
        RANK_CHECK(ddp.bucket_parameter_names() == expected, "bucket assignment");
        Generator data(2 + rank);
        Tensor loss = ops::cross_entropy(ddp(randn({4, 784}, data)), labels(4, data));
        RANK_CHECK(ddp.backward_trace().launches.empty(), "nothing launched before backward");
        backward(loss);
        const BackwardTrace t = ddp.backward_trace();
        RANK_CHECK(t.finished && t.hooks_fired == 6, t.hooks_fired);
        RANK_CHECK(t.launches.size() == 3, t.launches.size());
        for (size_t k = 0; k < 3; ++k) RANK_CHECK(t.launches[k].bucket == k, "launch order");
        RANK_CHECK(t.launches[0].hooks_fired == 4, t.launches[0].hooks_fired);
        RANK_CHECK(t.launches[0].hooks_fired < t.hooks_fired,
                   "bucket 0 launched only when backward had finished");
        // layers.1.weight's hook fires before layers.1.bias's: bucket 2 is complete first but
        // waits for bucket 1, so both go at the last hook.
        RANK_CHECK(t.launches[1].hooks_fired == 6 && t.launches[2].hooks_fired == 6, "");
        // state_dict carries the module. prefix.
        RANK_CHECK(ddp.state_dict().front().first == "module.layers.1.weight",
                   ddp.state_dict().front().first);
      },
      2);
}

// register_comm_hook with PyTorch's compressing hooks: each bucket, divided by the world size,
// goes over the wire in 16 bits (half the bytes) and is summed in float32 per hop, so each
// gradient is exactly to16(to16(g0 / 2) + to16(g1 / 2)), g0 and g1 the ranks' own gradients.
TEST(DdpCommHookTest, CompressingHooksSendHalfTheBytesAndSumTheRoundedHalves) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2, std::chrono::minutes(2));
        Generator data(11);
        const Tensor x = randn({8, 784}, data);
        const Tensor y = labels(8, data);
        // Both ranks' own gradients, from the same initial weights (rank 0's, as DDP takes).
        std::vector<std::vector<std::vector<float>>> own(2);
        for (int r = 0; r < 2; ++r) {
          Generator g(100);
          models::Mlp m(g);
          backward(ops::cross_entropy(m.forward(x.narrow(0, 4 * r, 4).contiguous()),
                                      y.narrow(0, 4 * r, 4).contiguous()));
          for (const Tensor& p : m.parameters()) own[r].push_back(p.grad().to_vector<float>());
        }
        int64_t fp32_bytes = 0;
        for (const auto hook : {distributed::CommHook::kAllReduce,
                                distributed::CommHook::kBf16Compress,
                                distributed::CommHook::kFp16Compress}) {
          Generator g(100 + rank);
          auto model = std::make_shared<models::Mlp>(g);
          DistributedDataParallel ddp(model, group);
          if (hook != distributed::CommHook::kAllReduce) ddp.register_comm_hook(hook);
          backward(ops::cross_entropy(ddp(x.narrow(0, 4 * rank, 4).contiguous()),
                                      y.narrow(0, 4 * rank, 4).contiguous()));
          const int64_t bytes = ddp.backward_trace().bytes_all_reduced;
          if (hook == distributed::CommHook::kAllReduce) {
            fp32_bytes = bytes;
            continue;
          }
          RANK_CHECK(bytes * 2 == fp32_bytes, bytes << " bytes against " << fp32_bytes);
          const DType dt =
              hook == distributed::CommHook::kBf16Compress ? DType::kBFloat16 : DType::kFloat16;
          const auto to16 = [dt](const std::vector<float>& v) {
            return Tensor::from_vector(v, {static_cast<int64_t>(v.size())})
                .to(dt)
                .to(DType::kFloat32)
                .to_vector<float>();
          };
          const std::vector<Tensor> params = model->parameters();
          for (size_t i = 0; i < params.size(); ++i) {
            std::vector<float> a = own[0][i], b = own[1][i];
            for (float& v : a) v *= 0.5f;
            for (float& v : b) v *= 0.5f;
            a = to16(a);
            b = to16(b);
            for (size_t k = 0; k < a.size(); ++k) a[k] += b[k];
            RANK_CHECK(params[i].grad().to_vector<float>() == to16(a),
                       distributed::comm_hook_name(hook) << ": parameter " << i);
          }
          // Once, and before the first backward.
          bool refused = false;
          try {
            ddp.register_comm_hook(hook);
          } catch (const Error& e) {
            refused = std::string(e.what()).find("only be called once") != std::string::npos;
          }
          RANK_CHECK(refused, "a second register_comm_hook");
        }
        Generator g(100);
        DistributedDataParallel late(std::make_shared<models::Mlp>(g), group);
        backward(ops::cross_entropy(late(x.narrow(0, 4 * rank, 4).contiguous()),
                                    y.narrow(0, 4 * rank, 4).contiguous()));
        bool refused = false;
        try {
          late.register_comm_hook(distributed::CommHook::kBf16Compress);
        } catch (const Error& e) {
          refused = std::string(e.what()).find("before the first backward") != std::string::npos;
        }
        RANK_CHECK(refused, "register_comm_hook after a backward");
        distributed::destroy_process_group();
      },
      2);
}

// Design note "when to overlap": all-reduces wait for the end of backward only on host devices
// whose ranks fill the cores and whose group's waits spin; kDuringBackward/kAfterBackward decide.
TEST(DdpOverlapTest, AllReducesWaitForBackwardOnlyWhereTheyWouldSpinOnBusyCores) {
  using Overlap = DistributedDataParallelOptions::Overlap;
  EXPECT_FALSE(overlap_during_backward(Overlap::kAuto, true, true, 2, 1, 2));  // this CI machine
  EXPECT_FALSE(overlap_during_backward(Overlap::kAuto, true, true, 2, 2, 4));
  EXPECT_TRUE(overlap_during_backward(Overlap::kAuto, true, true, 2, 1, 4));   // a core to spare
  EXPECT_TRUE(overlap_during_backward(Overlap::kAuto, true, false, 2, 1, 2));  // Gloo sleeps
  EXPECT_TRUE(overlap_during_backward(Overlap::kAuto, false, true, 8, 1, 2));  // GPUs
  EXPECT_TRUE(overlap_during_backward(Overlap::kDuringBackward, true, true, 2, 1, 2));
  EXPECT_FALSE(overlap_during_backward(Overlap::kAfterBackward, false, false, 1, 1, 64));
}

// The ranks start their all-reduces at the same points: one rank asking for "after backward" makes
// every rank's DDP do so (a SyncBatchNorm collective in backward would otherwise meet a bucket).
TEST(DdpOverlapTest, RanksThatDisagreeAllStartAfterBackward) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        Generator g(1);
        DistributedDataParallelOptions o;
        o.overlap = rank == 0 ? DistributedDataParallelOptions::Overlap::kDuringBackward
                              : DistributedDataParallelOptions::Overlap::kAfterBackward;
        DistributedDataParallel ddp(std::make_shared<models::Mlp>(g), group, o);
        RANK_CHECK(!ddp.overlaps_backward(), "rank " << rank << " overlaps");
        Generator data(2 + rank);
        backward(ops::cross_entropy(ddp(randn({4, 784}, data)), labels(4, data)));
        const BackwardTrace t = ddp.backward_trace();
        for (const BucketLaunch& l : t.launches) RANK_CHECK(l.hooks_fired == t.hooks_fired, "");
      },
      2);
}

// Linear "used" always; "branch" only when `use_branch` (it may differ between ranks).
class Branchy : public Cloneable<Branchy> {
 public:
  Branchy(Generator& g, bool use_branch) : use_branch_(use_branch) {
    register_module("used", std::make_shared<nn::Linear>(8, 4, g));
    register_module("branch", std::make_shared<nn::Linear>(8, 4, g));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = child("used").forward(x);
    return use_branch_ ? ops::add(y, child("branch").forward(x)) : y;
  }
  std::string repr() const override { return "Branchy"; }

 private:
  bool use_branch_;
};

TEST(DdpUnusedParametersTest, WithTheFlagUnusedBranchesComplete) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        Generator data(5);
        Tensor x = randn({6, 8}, data);
        Tensor target = randn({6, 4}, data);
        Tensor xs = x.narrow(0, 3 * rank, 3).contiguous();
        Tensor ts = target.narrow(0, 3 * rank, 3).contiguous();
        // Reference: the used layer alone on the global batch.
        Generator g0(11);
        Branchy single(g0, false);
        backward(ops::mse_loss(single(x), target));

        DistributedDataParallelOptions o;
        o.find_unused_parameters = true;
        {
          Generator g(11);
          auto model = std::make_shared<Branchy>(g, false);
          DistributedDataParallel ddp(model, group, o);
          for (int iteration = 0; iteration < 2; ++iteration) {
            model->zero_grad();
            backward(ops::mse_loss(ddp(xs), ts));
            const BackwardTrace t = ddp.backward_trace();
            RANK_CHECK(t.finished && t.unused_marked == 2, t.unused_marked);
            RANK_CHECK(!model->find("branch.weight").grad().defined(),
                       "a parameter no rank used keeps an undefined grad");
            for (const char* name : {"used.weight", "used.bias"}) {
              const double e = rel_error(model->find(name).grad().to_vector<float>(),
                                         single.find(name).grad().to_vector<float>());
              RANK_CHECK(e < 1e-5, name << " relative error " << e);
            }
          }
        }
        {
          // Only rank 1 uses the branch: rank 0 gets the average of 0 and rank 1's gradient.
          Generator g(11);
          auto model = std::make_shared<Branchy>(g, rank == 1);
          DistributedDataParallel ddp(model, group, o);
          backward(ops::mse_loss(ddp(xs), ts));
          RANK_CHECK(ddp.backward_trace().unused_marked == (rank == 0 ? 2u : 0u), "");
          Tensor grad = model->find("branch.bias").grad();
          RANK_CHECK(grad.defined(), "used on another rank: the average is this rank's grad");
          std::vector<Tensor> all;
          group->all_gather(grad, all);
          RANK_CHECK(rel_error(all[0].to_vector<float>(), all[1].to_vector<float>()) == 0, "");
        }
      },
      2);
}

TEST(DdpUnusedParametersTest, WithoutTheFlagTheNextForwardNamesTheParameters) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        Generator g(11);
        auto model = std::make_shared<Branchy>(g, false);
        DistributedDataParallel ddp(model, group);
        Generator data(5 + rank);
        Tensor x = randn({3, 8}, data);
        Tensor target = randn({3, 4}, data);
        backward(ops::mse_loss(ddp(x), target));  // returns: nothing waits on the stuck bucket
        RANK_CHECK(!ddp.backward_trace().finished, "");
        const std::string e = error_of([&] { ddp(x); });
        RANK_CHECK(e.find("Expected to have finished reduction in the prior iteration before "
                          "starting a new one") != std::string::npos,
                   e);
        RANK_CHECK(e.find("find_unused_parameters = true") != std::string::npos, e);
        RANK_CHECK(e.find("did not receive grad for rank " + std::to_string(rank) +
                          ": branch.weight, branch.bias") != std::string::npos,
                   e);
        // A forward without grad (evaluation) is not a new iteration and still works.
        NoGradGuard no_grad;
        ddp(x);
      },
      2);
}

// Two micro-batches per rank, the first under no_sync: the result equals one step on all four.
TEST(DdpNoSyncTest, AccumulationEqualsOneStepOnTheCombinedBatches) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        Generator data(9);
        Tensor x = randn({kGlobalBatch, 784}, data);
        Tensor y = labels(kGlobalBatch, data);
        Generator g0(3);
        models::Mlp single(g0);
        const Step reference = sgd_step(single, single, x, y, false);

        for (bool as_view : {false, true}) {
          Generator g(3);
          auto model = std::make_shared<models::Mlp>(g);
          DistributedDataParallelOptions o;
          o.gradient_as_bucket_view = as_view;
          DistributedDataParallel ddp(model, group, o);
          optim::SGD sgd(model->parameters(), sgd_options());
          // Rank r holds samples [6r, 6r + 6): micro-batches [6r, 6r + 3) and [6r + 3, 6r + 6).
          auto micro = [&](int k) {
            const int64_t start = 6 * rank + 3 * k;
            Tensor loss = ops::cross_entropy(ddp(x.narrow(0, start, 3).contiguous()),
                                             y.narrow(0, start, 3).contiguous());
            backward(ops::mul_scalar(loss, 0.5f));
          };
          {
            auto guard = ddp.no_sync();
            RANK_CHECK(!ddp.require_backward_grad_sync(), "");
            micro(0);
          }
          RANK_CHECK(ddp.backward_trace().hooks_fired == 0, "no_sync backward counted hooks");
          RANK_CHECK(ddp.require_backward_grad_sync(), "");
          micro(1);
          RANK_CHECK(ddp.backward_trace().finished, "");
          Step s;
          for (const Tensor& p : model->parameters())
            s.grads.push_back(p.grad().to_vector<float>());
          sgd.step();
          for (const Tensor& p : model->parameters()) s.params.push_back(p.to_vector<float>());
          s.loss = reference.loss;
          expect_same(s, reference, as_view ? "no_sync, views" : "no_sync");
        }
      },
      2);
}

std::shared_ptr<Module> small_net(std::vector<int64_t> widths, Generator& g) {
  auto s = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) s->push_back(std::make_shared<nn::ReLU>());
    s->push_back(std::make_shared<nn::Linear>(widths[i], widths[i + 1], g));
  }
  return s;
}

TEST(DdpConstructionTest, DifferentShapesAcrossRanksNameTheFirstDifference) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 3);
        Generator g(1);
        // Rank 1's hidden layer is narrower: parameter 0 differs first.
        auto a = small_net({4, rank == 1 ? 6 : 8, 2}, g);
        std::string e = error_of([&] { DistributedDataParallel ddp(a, group); });
        RANK_CHECK(e.find("parameter 0 is 0.weight with shape torch.Size([8, 4]) on rank 0 and "
                          "0.weight with shape torch.Size([6, 4]) on rank 1") != std::string::npos,
                   e);
        // Rank 2 has one more layer: the first parameter without a counterpart is named.
        auto b = small_net(
            rank == 2 ? std::vector<int64_t>{4, 8, 2, 2} : std::vector<int64_t>{4, 8, 2}, g);
        e = error_of([&] { DistributedDataParallel ddp(b, group); });
        RANK_CHECK(e.find("rank 0 has 4 parameters and rank 2 has 6: parameter 4 (4.weight with "
                          "shape torch.Size([2, 2])) on rank 2 has no counterpart on rank 0") !=
                       std::string::npos,
                   e);
        // A layer frozen on rank 1 only would give the ranks different buckets.
        Generator same(2);
        auto f = small_net({4, 8, 2}, same);
        if (rank == 1) f->find("2.bias").requires_grad_(false);
        e = error_of([&] { DistributedDataParallel ddp(f, group); });
        RANK_CHECK(e.find("parameter 3 (2.bias) has requires_grad=true on rank 0 and false on "
                          "rank 1") != std::string::npos,
                   e);
        // Same shapes, different values: rank 0's are broadcast.
        Generator mine(50 + rank);
        auto c = small_net({4, 8, 2}, mine);
        DistributedDataParallel ddp(c, group);
        std::vector<Tensor> all;
        group->all_gather(c->find("2.weight").contiguous(), all);
        for (int r = 1; r < 3; ++r) {
          RANK_CHECK(all[r].to_vector<float>() == all[0].to_vector<float>(), "rank " << r);
        }
        const std::string devices = error_of([&] {
          DistributedDataParallelOptions o;
          o.device_ids = {Device(), Device()};
          DistributedDataParallel two(c, group, o);
        });
        RANK_CHECK(devices.find("device_ids can only be empty or contain a single element") !=
                       std::string::npos,
                   devices);
      },
      3);
}

// Rank 1's running statistics drift from rank 0's; each training forward starts from rank 0's
// buffers (broadcast_buffers), so with the same input both ranks end with the same buffers.
TEST(DdpBuffersTest, TrainingForwardsStartFromRankZerosBuffers) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        for (bool broadcast : {true, false}) {
          Generator g(1);
          auto net = std::make_shared<nn::Sequential>();
          net->push_back(std::make_shared<nn::Linear>(4, 3, g));
          net->push_back(std::make_shared<nn::BatchNorm2d>(3));
          DistributedDataParallelOptions o;
          o.broadcast_buffers = broadcast;
          DistributedDataParallel ddp(net, group, o);
          net->find("1.running_mean").fill_(static_cast<float>(rank));  // drift
          // int64 buffers travel in the same (float32) buffer, bit for bit.
          const int64_t big = (int64_t{1} << 40) + 3;
          net->find("1.num_batches_tracked")
              .copy_(Tensor::from_vector(std::vector<int64_t>{big + rank}, Shape{}));
          Generator data(6);
          ddp(randn({5, 4}, data));
          std::vector<Tensor> all;
          group->all_gather(net->find("1.running_mean"), all);
          const bool same = all[0].to_vector<float>() == all[1].to_vector<float>();
          RANK_CHECK(same == broadcast, "broadcast_buffers=" << broadcast);
          const int64_t tracked = net->find("1.num_batches_tracked").to_vector<int64_t>()[0];
          RANK_CHECK(tracked == (broadcast ? big + 1 : big + rank + 1), tracked);
        }
      },
      2);
}

// Rank 2 dies inside its backward, right after launching its first bucket: ranks 0 and 1 get
// an error naming it from backward() instead of hanging, within the group's timeout.
TEST(DdpFailureTest, ARankLostMidBackwardIsNamed) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 3, milliseconds(3000));
        Generator g(1);
        auto model = std::make_shared<models::Mlp>(g);
        DistributedDataParallel ddp(model, group);
        Generator data(4 + rank);
        Tensor loss = ops::cross_entropy(ddp(randn({4, 784}, data)), labels(4, data));
        if (rank == 2) {
          // After DDP's own hook, which completes (and launches) bucket 0. The exit is the
          // system call itself: the sanitizers' _exit runs LeakSanitizer's scan first, which
          // freezes the process for seconds, a stall the watchdog rightly reports as one.
          model->find("layers.3.weight").autograd().post_accumulate_hooks.emplace_back([](Tensor&) {
            ::syscall(SYS_exit_group, 0);
          });
        }
        const std::string e = error_of([&] { backward(loss); });
        // A rank whose own peer in the ring was rank 2 sees the connection drop; a rank waiting
        // on a survivor times out, and the watchdog names rank 2 from its heartbeats.
        RANK_CHECK(e.find("lost connection to rank 2") != std::string::npos ||
                       e.find("rank 2 stopped answering") != std::string::npos,
                   e);
        RANK_CHECK(e.find("rank " + std::to_string(rank) + " of 3") != std::string::npos, e);
        auto store = std::make_shared<TCPStore>("127.0.0.1", port, false, milliseconds(20000));
        store->set("checked/" + std::to_string(rank), {'1'});
        store->wait({"checked/0", "checked/1"}, milliseconds(20000));
      },
      3);
}

}  // namespace
}  // namespace dpe
