// Interop with PyTorch: //tools:train writes DIR/model.safetensors, PyTorch
// loads it with load_state_dict(strict=True) into the same model written in PyTorch
// (pytorch_interop.py) and gets dpe's logits on Fashion-MNIST test images; the reverse: a PyTorch
// state_dict saved as safetensors loads strict into dpe's model (also without BatchNorm's
// num_batches_tracked) and gives PyTorch's logits. Needs /usr/bin/python3 with torch
// (python3-torch; or $DPE_PYTHON); without it the test skips itself, saying so. Tagged "pytorch".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/data/fashion_mnist.h"
#include "engine/io/safetensors.h"
#include "models/by_name.h"

namespace {

std::string g_train, g_script;
// Debian's python3 (python3-torch installs there); DPE_PYTHON overrides it (a check of the skip).
const std::string kPython =
    std::getenv("DPE_PYTHON") != nullptr ? std::getenv("DPE_PYTHON") : "/usr/bin/python3";

// Runs `cmd` through the shell; returns its exit code and fills `output` (stdout+stderr).
int run(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 512> buf{};
  output->clear();
  while (fgets(buf.data(), buf.size(), p) != nullptr) *output += buf.data();
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string tmp_path(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

double max_abs_difference(const dpe::Tensor& a, const dpe::Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  return worst;
}

double max_abs(const dpe::Tensor& a) {
  double m = 0;
  for (float v : a.to_vector<float>()) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// dpe's eval-mode logits of `state` (loaded strict into a fresh `model`) on `input`.
dpe::Tensor dpe_logits(const std::string& model, const dpe::StateDict& state,
                       const dpe::Tensor& input) {
  dpe::Generator gen(123);  // the initial weights are all overwritten
  std::shared_ptr<dpe::Module> m = dpe::models::make_model(model, gen);
  m->load_state_dict(state, /*strict=*/true);
  m->eval();
  dpe::NoGradGuard no_grad;
  return m->forward(input);
}

class PytorchInteropTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string out;
    if (run(kPython + " -c 'import torch'", &out) != 0) {
      GTEST_SKIP() << "PyTorch is not installed here (" << kPython
                   << " -c 'import torch' failed; apt-get install python3-torch): " << out;
    }
    struct stat st {};
    if (::stat(dpe::FashionMnist::kDefaultRoot, &st) != 0) {
      GTEST_SKIP() << "Fashion-MNIST is not installed in " << dpe::FashionMnist::kDefaultRoot;
    }
  }
};

TEST_P(PytorchInteropTest, CheckpointsLoadBothWaysWithTheSameLogits) {
  const std::string model = GetParam();
  const std::string dir = tmp_path("interop_" + model);
  std::string out;
  // A few steps of dpe training; the checkpoint set lands in dir.
  ASSERT_EQ(run(g_train + " --mode single --model " + model +
                    " --epochs 1 --max-steps 5 --batch-size 64 --train-samples 640"
                    " --test-samples 256 --no-progress --checkpoint-dir " +
                    dir,
                &out),
            0)
      << out;
  std::printf("%s", out.c_str());

  // 256 test images, normalized as train sees them.
  dpe::FashionMnist test(dpe::FashionMnist::kDefaultRoot, /*train=*/false);
  std::vector<int64_t> first(256);
  std::iota(first.begin(), first.end(), 0);
  const dpe::Batch batch = test.get_batch(first);
  const std::string inputs = dir + "/inputs.safetensors";
  dpe::save_safetensors(inputs, {{"input", batch.input}, {"target", batch.target}});

  ASSERT_EQ(run(kPython + " " + g_script + " --model " + model + " --dpe-model " + dir +
                    "/model.safetensors --inputs " + inputs + " --out " + dir,
                &out),
            0)
      << out;
  std::printf("%s", out.c_str());

  // dpe -> PyTorch.
  const dpe::Tensor ours =
      dpe_logits(model, dpe::load_safetensors(dir + "/model.safetensors"), batch.input);
  const dpe::Tensor torch_of_ours =
      dpe::load_safetensors(dir + "/torch_logits_of_dpe.safetensors").at(0).second;
  const double forward_diff = max_abs_difference(ours, torch_of_ours);

  // PyTorch -> dpe, with and without num_batches_tracked.
  const dpe::StateDict theirs = dpe::load_safetensors(dir + "/torch_model.safetensors");
  const dpe::Tensor torch_logits =
      dpe::load_safetensors(dir + "/torch_logits.safetensors").at(0).second;
  const double reverse_diff =
      max_abs_difference(dpe_logits(model, theirs, batch.input), torch_logits);
  dpe::StateDict older;
  for (const auto& [k, v] : theirs) {
    if (k.find("num_batches_tracked") == std::string::npos) older.emplace_back(k, v);
  }
  const double older_diff = max_abs_difference(dpe_logits(model, older, batch.input), torch_logits);

  std::printf(
      "%s, 256 Fashion-MNIST test images, eval mode: max |logit difference| dpe -> PyTorch %.3g "
      "(largest |logit| %.3g), PyTorch -> dpe %.3g (largest |logit| %.3g), PyTorch -> dpe "
      "without num_batches_tracked %.3g\n",
      model.c_str(), forward_diff, max_abs(ours), reverse_diff, max_abs(torch_logits), older_diff);
  RecordProperty("dpe_to_pytorch_max_abs_diff", std::to_string(forward_diff));
  RecordProperty("pytorch_to_dpe_max_abs_diff", std::to_string(reverse_diff));
  EXPECT_LT(forward_diff, 1e-3);
  EXPECT_LT(reverse_diff, 1e-3);
  EXPECT_EQ(older_diff, reverse_diff);
}

INSTANTIATE_TEST_SUITE_P(Models, PytorchInteropTest, testing::Values("mlp", "convnet"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: pytorch_interop_test <path to tools/train> <pytorch_interop.py>\n");
    return 2;
  }
  g_train = argv[1];
  g_script = argv[2];
  return RUN_ALL_TESTS();
}
