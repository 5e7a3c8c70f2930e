// SyncBatchNorm over 2 ranks (separate processes, one host device each) against BatchNorm2d on the
// global batch: outputs, input gradients, weight/bias gradients after DDP's averaging, running
// statistics; evaluation without communication; convert_sync_batchnorm on a model tree.
#include "engine/distributed/sync_batch_norm.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/fusion.h"
#include "engine/nn/sequential.h"
#include "models/convnet.h"
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

void check_close(const Tensor& got, const Tensor& expected, const std::string& what,
                 double tolerance = 1e-5) {
  RANK_CHECK(got.shape() == expected.shape(),
             what << ": " << got.shape() << " vs " << expected.shape());
  const double e =
      rel_error(got.contiguous().to_vector<float>(), expected.contiguous().to_vector<float>());
  RANK_CHECK(e < tolerance, what << ": relative error " << e);
}

TEST(SyncBatchNormTest, TwoRanksEqualBatchNormOverTheGlobalBatch) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        const int world = 2;
        auto group = join_job(port, rank, world);
        Generator data(21);
        // A non-zero mean and scale per sample, so the statistics matter.
        Tensor x = ops::add(ops::mul_scalar(randn({8, 3, 4, 4}, data), 2.0f),
                            Tensor::full({8, 3, 4, 4}, 0.5f));
        Tensor weights = randn({8, 3, 4, 4}, data);  // loss = mean(y * weights)
        Tensor gamma = Tensor::from_vector(std::vector<float>{1.5f, -0.5f, 0.8f}, {3});
        Tensor beta = Tensor::from_vector(std::vector<float>{0.1f, 0.2f, -0.3f}, {3});

        nn::BatchNorm2d bn(3);
        bn.find("weight").copy_(gamma);
        bn.find("bias").copy_(beta);
        Tensor xg = x.clone();
        xg.requires_grad_();
        Tensor yg = bn(xg);
        backward(ops::mean(ops::mul(yg, weights)));

        auto tree = std::make_shared<nn::Sequential>();
        tree->push_back(std::make_shared<nn::BatchNorm2d>(3));
        auto converted = nn::convert_sync_batchnorm(tree, group);
        RANK_CHECK(converted == tree, "");
        RANK_CHECK(dynamic_cast<nn::SyncBatchNorm*>(&tree->child("0")) != nullptr,
                   tree->child("0").repr());
        tree->find("0.weight").copy_(gamma);
        tree->find("0.bias").copy_(beta);
        DistributedDataParallel ddp(tree, group);

        Tensor xs = x.narrow(0, 4 * rank, 4).contiguous();
        xs.requires_grad_();
        Tensor ys = ddp(xs);
        check_close(ys, yg.detach().narrow(0, 4 * rank, 4), "output");
        Tensor ws = weights.narrow(0, 4 * rank, 4).contiguous();
        backward(ops::mean(ops::mul(ys, ws)));
        // The input gradient is that of the sum of the ranks' mean losses: world x the gradient
        // of the global mean (PyTorch's SyncBatchNorm does the same).
        check_close(ops::mul_scalar(xs.grad(), 1.0f / world), xg.grad().narrow(0, 4 * rank, 4),
                    "input gradient");
        check_close(tree->find("0.weight").grad(), bn.find("weight").grad(), "weight gradient");
        check_close(tree->find("0.bias").grad(), bn.find("bias").grad(), "bias gradient");
        check_close(tree->find("0.running_mean"), bn.find("running_mean"), "running_mean");
        check_close(tree->find("0.running_var"), bn.find("running_var"), "running_var");
        RANK_CHECK(tree->find("0.num_batches_tracked").to_vector<int64_t>()[0] == 1, "");

        // Evaluation uses the running statistics and does not communicate: rank 0 alone.
        ddp.eval();
        bn.eval();
        if (rank == 0) {
          NoGradGuard no_grad;
          check_close(ddp(xs.detach()), bn(x).narrow(0, 0, 4), "evaluation output");
        }
        group->barrier();
      },
      2);
}

TEST(SyncBatchNormTest, ConvertKeepsTensorsNamesAndModes) {
  // No group: a SyncBatchNorm in one process is BatchNorm2d (in a child: no tensors in the
  // forking parent).
  spawn(
      [](int) {
        Generator g(3);
        auto net = std::make_shared<models::ConvNet>(g, true);
        net->eval();
        const StateDict before = net->state_dict();
        auto out = nn::convert_sync_batchnorm(net);
        RANK_CHECK(out == net, "");
        const StateDict after = net->state_dict();
        RANK_CHECK(before.size() == after.size(), "");
        for (size_t i = 0; i < before.size(); ++i) {
          RANK_CHECK(before[i].first == after[i].first, before[i].first << " " << after[i].first);
          RANK_CHECK(before[i].second.is_same(after[i].second), before[i].first << " is shared");
        }
        auto& bn = net->child("layer1").child("1");
        RANK_CHECK(bn.repr().rfind("SyncBatchNorm(16, eps=1e-05, momentum=0.1", 0) == 0, bn.repr());
        RANK_CHECK(!bn.is_training(), "the mode is kept");
        // A SyncBatchNorm runs its own forward (its all-reduces): never fused with the ReLU after.
        RANK_CHECK(!nn::fuses_batch_norm_relu(bn, net->child("layer1").child("2")),
                   "SyncBatchNorm + " << net->child("layer1").child("2").repr() << " fused");
        // A BatchNorm2d at the root is replaced by the returned module.
        auto root = nn::convert_sync_batchnorm(std::make_shared<nn::BatchNorm2d>(4));
        RANK_CHECK(dynamic_cast<nn::SyncBatchNorm*>(root.get()) != nullptr, root->repr());

        // Training without a process group: BatchNorm2d's numbers.
        net->train();
        Generator g2(3);
        models::ConvNet plain(g2, true);
        Tensor x = randn({4, 1, 28, 28}, g2);
        check_close((*net)(x), plain(x), "single-process SyncBatchNorm");
        check_close(net->find("layer2.1.running_var"), plain.find("layer2.1.running_var"),
                    "running_var");
        const std::string e = error_of([&] { (*net)(randn({1, 1, 1, 1}, g2)); });
        RANK_CHECK(!e.empty(), "");
      },
      1);
}

}  // namespace
}  // namespace dpe
