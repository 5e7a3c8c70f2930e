// //tools:train's command line and its exit codes (docs/flags.md, "Exit codes"): bad flags, flag values
// and DPE_* environment values exit with 2, data and checkpoint files that are missing or corrupt
// with 3, a failed run with 1; --devices against DPE_HOST_DEVICES, --rdzv-timeout; a run killed
// at any moment resumes; DDP over MPI (mpirun) trains exactly as DDP over Gloo; --max-steps is a
// total over the run, resumes included.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/tensor/tensor.h"
#include "tests/tools/run_tool.h"
#include "tests/util/free_port.h"

namespace {

using dpe::test::has;

std::string g_train;

// Runs the train binary with `args` (and `env`, "NAME=value ..." for the shell); returns the exit
// code and fills `output` (stdout+stderr).
int run(const std::string& args, std::string* output, const std::string& env = "") {
  return dpe::test::run_tool(g_train, args, output, env);
}

TEST(TrainCliTest, UnknownFlag) {
  std::string out;
  EXPECT_EQ(run("--bogus 3", &out), 2);
  EXPECT_NE(out.find("--bogus"), std::string::npos) << out;
}

TEST(TrainCliTest, BadValues) {
  std::string out;
  EXPECT_EQ(run("--mode sideways", &out), 2);
  EXPECT_NE(out.find("sideways"), std::string::npos) << out;
  EXPECT_EQ(run("--epochs 0", &out), 2);
  EXPECT_NE(out.find("--epochs"), std::string::npos) << out;
  EXPECT_EQ(run("--batch-size many", &out), 2);
  EXPECT_NE(out.find("many"), std::string::npos) << out;
  EXPECT_EQ(run("--gradient-as-bucket-view", &out), 2);  // a DDP option, given to a single run
  EXPECT_NE(out.find("--gradient-as-bucket-view needs --mode ddp"), std::string::npos) << out;
  EXPECT_EQ(run("--gradient-as-bucket-view false", &out), 2);
  EXPECT_NE(out.find("--gradient-as-bucket-view needs --mode ddp"), std::string::npos) << out;
  EXPECT_EQ(run("--mode ddp --gradient-as-bucket-view maybe", &out), 2);
  EXPECT_NE(out.find("maybe"), std::string::npos) << out;
  EXPECT_EQ(run("--ddp-comm-hook bf16", &out), 2);  // a hook of DDP's buckets, without DDP
  EXPECT_NE(out.find("--ddp-comm-hook bf16 needs --mode ddp"), std::string::npos) << out;
  EXPECT_EQ(run("--mode ddp --ddp-comm-hook int8", &out), 2);
  EXPECT_NE(out.find("int8"), std::string::npos) << out;
}

TEST(TrainCliTest, MissingDataDir) {
  std::string out;
  EXPECT_EQ(run("--data-dir /nonexistent/fmnist", &out), 2);
  EXPECT_NE(out.find("/nonexistent/fmnist"), std::string::npos) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}

TEST(TrainCliTest, HelpSaysWhichBatchSizeIsGlobal) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_NE(out.find("GLOBAL for single and dp"), std::string::npos) << out;
  EXPECT_NE(out.find("PER PROCESS for"), std::string::npos) << out;
  EXPECT_NE(out.find("how many devices --mode dp runs on, a COUNT"), std::string::npos) << out;
  // DDP's defaults are bench's, and the help says so.
  EXPECT_NE(out.find("(the default, as bench's)"), std::string::npos) << out;
  // Boolean flags say their real default, not the value a lone flag takes.
  EXPECT_EQ(out.find("BOOLEAN="), std::string::npos) << out;
  EXPECT_NE(out.find("--zero [true|false]"), std::string::npos) << out;
  EXPECT_EQ(out.find("--corpus-documents"), std::string::npos) << "a test knob: " << out;
}

// The gpt models' tiny configuration: a slice of the corpus and a small tokenizer cached in the
// test's directory, windows of 16 tokens, so a run takes seconds and needs no network.
std::string tiny_gpt(const std::string& model) {
  const char* t = std::getenv("TEST_TMPDIR");
  return "--model " + model + " --context 16 --batch-size 2 --max-steps 1 --test-samples 2 " +
         "--train-samples 8 --corpus-documents 600 --vocab-size 400 --no-progress --cache-dir " +
         std::string(t ? t : "/tmp") + "/lm_cache";
}

TEST(TrainCliTest, AcceptsTheGptModels) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_NE(out.find("gpt-small"), std::string::npos) << out;
  EXPECT_NE(out.find("--context"), std::string::npos) << out;
  // gpt-small, and the real-size gpt2 (12 layers, d 768) for one step.
  for (const char* model : {"gpt-small", "gpt2"}) {
    EXPECT_EQ(run(tiny_gpt(model), &out), 0) << out;
    EXPECT_NE(out.find("training " + std::string(model) + ", mode single"), std::string::npos)
        << out;
    EXPECT_NE(out.find("adamw lr"), std::string::npos) << out;
    EXPECT_NE(out.find("val perplexity"), std::string::npos) << out;
    EXPECT_NE(out.find("(unigram baseline"), std::string::npos) << out;
  }
}

TEST(TrainCliTest, BadGptFlagsAreNamed) {
  std::string out;
  EXPECT_EQ(run("--model gpt-small --context 200", &out), 2);
  EXPECT_NE(out.find("--context 200 must be between 1 and gpt-small's block size 128"),
            std::string::npos)
      << out;
  EXPECT_EQ(run("--model convnet --context 16", &out), 2);
  EXPECT_NE(out.find("--context applies to the gpt models only"), std::string::npos) << out;
  EXPECT_EQ(run(tiny_gpt("gpt-small") + " --momentum 0.5", &out), 2);
  EXPECT_NE(out.find("--momentum is SGD's"), std::string::npos) << out;
  EXPECT_EQ(run(tiny_gpt("gpt-small") + " --optimizer rmsprop", &out), 2);
  EXPECT_NE(out.find("rmsprop"), std::string::npos) << out;
  EXPECT_EQ(run("--model gpt3", &out), 2);
  EXPECT_NE(out.find("gpt3"), std::string::npos) << out;
}

// The "epoch N: train loss X, val loss Y, val perplexity Z" parts of `out`, without the timing.
std::string epoch_losses(const std::string& out) {
  std::string losses;
  for (size_t at = out.find("epoch "); at != std::string::npos; at = out.find("epoch ", at + 1)) {
    const size_t end = out.find(" (unigram", at);
    if (end != std::string::npos) losses += out.substr(at, end - at) + "\n";
  }
  return losses;
}

// --activation-checkpointing recomputes the gpt blocks in backward: the same losses, single and
// dp; a model without blocks exits 2 naming the model and the flag.
TEST(TrainCliTest, ActivationCheckpointingGivesTheSameLosses) {
  std::string plain, ckpt;
  for (const std::string mode : {"--mode single", "--mode dp --devices 2"}) {
    const std::string args = tiny_gpt("gpt-small") + " " + mode;
    ASSERT_EQ(run(args, &plain), 0) << plain;
    ASSERT_EQ(run(args + " --activation-checkpointing", &ckpt), 0) << ckpt;
    ASSERT_NE(epoch_losses(plain), "") << plain;
    EXPECT_EQ(epoch_losses(ckpt), epoch_losses(plain)) << mode;
  }
  EXPECT_EQ(run("--model convnet --activation-checkpointing", &ckpt), 2);
  EXPECT_TRUE(has(ckpt, "--activation-checkpointing: convnet has no unit to checkpoint")) << ckpt;
}

std::string tmp_path(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// A toy run of one step: seconds, no data files.
const std::string kToy =
    "--model toy --train-samples 64 --test-samples 32 --max-steps 1 "
    "--no-progress";

// Usage errors exit with 2, whatever finds them: CLI11's checks, train's own,
// or the DPE_* variables the runtime reads; numbers are checked for nan and inf, and ranges print
// short bounds (--batch-size 0 once printed a 309-digit range).
TEST(TrainCliTest, UsageErrorsExitWith2) {
  std::string out;
  for (const char* args :
       {"--lr nan", "--lr inf", "--lr -1", "--momentum nan", "--weight-decay nan",
        "--clip-grad-norm inf", "--batch-size 0", "--epochs 0", "--epochs 2000000", "--devices 0",
        "--rdzv-timeout 0", "--rdzv-timeout nan", "--max-steps -1", "--max-steps-per-epoch -1"}) {
    EXPECT_EQ(run(kToy + " " + args, &out), 2) << args << ": " << out;
    const std::string flag = std::string(args).substr(0, std::string(args).find(' '));
    EXPECT_TRUE(has(out, flag)) << args << ": " << out;
    EXPECT_LT(out.size(), 600u) << args << ": " << out;
    EXPECT_FALSE(has(out, "training toy")) << args << ": nothing runs: " << out;
  }
  for (const char* env : {"DPE_HOST_DEVICES=abc", "DPE_HOST_DEVICES=0", "DPE_HOST_THREADS=-2",
                          "DPE_HOST_DEVICE_MEMORY=lots", "DPE_HOST_DEVICE_MEMORY=0",
                          "DPE_HOST_DEVICE_MEMORY=999999999999999GiB"}) {
    EXPECT_EQ(run(kToy, &out, env), 2) << env << ": " << out;
    const std::string name = std::string(env).substr(0, std::string(env).find('='));
    EXPECT_TRUE(has(out, name)) << env << ": " << out;
  }
  EXPECT_TRUE(run(kToy, &out, "DPE_HOST_DEVICE_MEMORY=0") == 2 && has(out, "unset it for no cap"))
      << out;
  // ddp: the rendezvous variables are checked before any rendezvous.
  EXPECT_EQ(run("--mode ddp " + kToy, &out,
                "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 DPE_RDZV_TIMEOUT=soon"),
            2)
      << out;
  EXPECT_TRUE(has(out, "DPE_RDZV_TIMEOUT='soon'")) << out;
}

// --mode ddp's environment is checked before any work, as the DPE_* values are: no RANK and
// WORLD_SIZE (and no launcher's variables), a MASTER_PORT that is no port, and --backend mpi in
// a job whose ranks a launcher other than mpirun numbered (MPI would see a world of one) are
// usage errors (2) naming the variables; they failed as runs (1).
TEST(TrainCliTest, DdpEnvironmentErrorsExitWith2) {
  std::string out;
  const std::string ddp = "--mode ddp " + kToy;
  const std::string no_launcher =
      "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK "
      "-u MASTER_ADDR -u MASTER_PORT";
  EXPECT_EQ(run(ddp, &out, no_launcher), 2) << out;
  EXPECT_TRUE(has(out, "--mode ddp needs RANK and WORLD_SIZE")) << out;
  EXPECT_FALSE(has(out, "training toy")) << out;
  for (const char* port : {"99999", "0", "http", ""}) {
    EXPECT_EQ(run(ddp, &out,
                  no_launcher + " RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port),
              2)
        << port << ": " << out;
    EXPECT_TRUE(has(out, "MASTER_PORT")) << port << ": " << out;
  }
  EXPECT_EQ(run(ddp, &out, no_launcher + " RANK=0 WORLD_SIZE=1 MASTER_PORT=29500"), 2) << out;
  EXPECT_TRUE(has(out, "MASTER_ADDR")) << out;
  EXPECT_EQ(run(ddp + " --backend mpi", &out,
                no_launcher + " RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"),
            2)
      << out;
  EXPECT_TRUE(has(out, "--backend mpi")) << out;
  EXPECT_TRUE(has(out, "mpirun")) << out;
}

// --devices wins over DPE_HOST_DEVICES and says so; without the flag, dp takes the variable.
TEST(TrainCliTest, DevicesFlagAndEnvironment) {
  std::string out;
  EXPECT_EQ(run("--mode dp --devices 4 " + kToy, &out, "DPE_HOST_DEVICES=2"), 0) << out;
  EXPECT_TRUE(has(out, "--devices 4 overrides DPE_HOST_DEVICES=2")) << out;
  EXPECT_TRUE(has(out, "mode dp (4 devices)")) << out;
  EXPECT_EQ(run("--mode dp " + kToy, &out, "DPE_HOST_DEVICES=3"), 0) << out;
  EXPECT_TRUE(has(out, "mode dp (3 devices)")) << out;
  EXPECT_FALSE(has(out, "overrides")) << out;
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A Fashion-MNIST folder: the real training files, and test files written by `images`/`labels`
// (plain IDX bytes: the reader takes plain files as well as gzip).
std::string data_dir(const std::string& name, const std::vector<unsigned char>& images,
                     const std::vector<unsigned char>& labels) {
  const std::string dir = tmp_path(name);
  ::mkdir(dir.c_str(), 0755);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
    (void)!::symlink((std::string("/usr/share/datasets/fashion-mnist/") + f).c_str(),
                     (dir + "/" + f).c_str());  // it exists on a second run
  }
  write_bytes(dir + "/t10k-images-idx3-ubyte.gz", images);
  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", labels);
  return dir;
}

// Data errors exit with 3 and name the file: corrupt data, an empty test set (no "accuracy
// 0.00%"), a missing or corrupt checkpoint.
TEST(TrainCliTest, DataErrorsExitWith3) {
  std::string out;
  const std::string mlp = "--model mlp --max-steps 1 --train-samples 64 --no-progress";
  // The test files announce 0 images and 0 labels.
  const std::string empty =
      data_dir("empty_test_set", {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28},
               {0, 0, 8, 1, 0, 0, 0, 0});
  EXPECT_EQ(run(mlp + " --data-dir " + empty, &out), 3) << out;
  EXPECT_TRUE(has(out, empty + "/t10k-images-idx3-ubyte.gz holds no images")) << out;
  EXPECT_FALSE(has(out, "accuracy")) << out;
  const std::string corrupt = data_dir("corrupt_test_set", {'n', 'o', 't', ' ', 'I', 'D', 'X'},
                                       {'n', 'o', 'r', ' ', 't', 'h', 'i', 's'});
  EXPECT_EQ(run(mlp + " --data-dir " + corrupt, &out), 3) << out;
  EXPECT_TRUE(has(out, corrupt + "/t10k-")) << out;
  // --resume without a checkpoint, and with a corrupt one.
  const std::string ck = tmp_path("cli_checkpoint");
  EXPECT_EQ(run(kToy + " --resume --checkpoint-dir " + ck, &out), 3) << out;
  EXPECT_TRUE(has(out, ck + "/checkpoint.safetensors")) << out;
  EXPECT_EQ(run(kToy + " --checkpoint-dir " + ck, &out), 0) << out;
  for (const char* file :
       {"model.safetensors", "optimizer.safetensors", "training_state.json", "checkpoint.json"}) {
    std::ifstream in(ck + "/" + file, std::ios::binary);
    const std::vector<unsigned char> good((std::istreambuf_iterator<char>(in)), {});
    write_bytes(ck + "/" + file, {'g', 'a', 'r', 'b', 'a', 'g', 'e'});
    EXPECT_EQ(run(kToy + " --epochs 2 --resume --checkpoint-dir " + ck, &out), 3) << out;
    EXPECT_TRUE(has(out, ck + "/" + file)) << out;
    write_bytes(ck + "/" + file, good);
  }
  // The older single-file layout is still read when there is no manifest.
  ::unlink((ck + "/checkpoint.json").c_str());
  write_bytes(ck + "/checkpoint.safetensors", {'g', 'a', 'r', 'b', 'a', 'g', 'e'});
  EXPECT_EQ(run(kToy + " --epochs 2 --resume --checkpoint-dir " + ck, &out), 3) << out;
  EXPECT_TRUE(has(out, ck + "/checkpoint.safetensors")) << out;
}

// The bytes of `path` ("" when it cannot be read).
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A run without --resume into a --checkpoint-dir that already holds a run (its checkpoint, its
// metrics.jsonl) is refused with 2, naming the directory and the files, and touches nothing: it
// used to append its metrics to the old run's and replace the old checkpoint. An empty directory,
// or one of other files, is fine.
TEST(TrainCliTest, AFreshRunIntoACheckpointDirIsRefused) {
  std::string out;
  const std::string ck = tmp_path("fresh_into_existing");
  ASSERT_EQ(run(kToy + " --checkpoint-dir " + ck, &out), 0) << out;
  const std::string metrics = file_bytes(ck + "/metrics.jsonl");
  const std::string manifest = file_bytes(ck + "/checkpoint.json");
  const std::string model = file_bytes(ck + "/model.safetensors");
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(run(kToy + " --seed 7 --checkpoint-dir " + ck, &out), 2) << out;
  EXPECT_TRUE(has(out, "--checkpoint-dir " + ck + " already holds a run (checkpoint.json, ")) << out;
  EXPECT_TRUE(has(out, "metrics.jsonl")) << out;
  EXPECT_TRUE(has(out, "pass --resume to continue it, or choose another directory")) << out;
  EXPECT_FALSE(has(out, "training toy")) << out;
  EXPECT_EQ(file_bytes(ck + "/metrics.jsonl"), metrics);
  EXPECT_EQ(file_bytes(ck + "/checkpoint.json"), manifest);
  EXPECT_EQ(file_bytes(ck + "/model.safetensors"), model);
  // --resume goes on from it.
  EXPECT_EQ(run("--model toy --train-samples 64 --test-samples 32 --no-progress --max-steps 2 "
                "--resume --checkpoint-dir " +
                    ck,
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "resumed from " + ck)) << out;

  // The older single-file layout counts too; an empty directory and unrelated files do not.
  const std::string legacy = tmp_path("fresh_into_legacy");
  ::mkdir(legacy.c_str(), 0755);
  std::ofstream(legacy + "/checkpoint.safetensors") << "x";
  EXPECT_EQ(run(kToy + " --checkpoint-dir " + legacy, &out), 2) << out;
  EXPECT_TRUE(has(out, "already holds a run (checkpoint.safetensors)")) << out;
  const std::string fresh = tmp_path("fresh_into_empty");
  ::mkdir(fresh.c_str(), 0755);
  std::ofstream(fresh + "/notes.txt") << "mine";
  EXPECT_EQ(run(kToy + " --checkpoint-dir " + fresh, &out), 0) << out;
  EXPECT_EQ(file_bytes(fresh + "/notes.txt"), "mine");
}

// --resume auto into a directory that holds a run goes on from it; into one whose run was stopped
// before its first checkpoint (a metrics line without its checkpoint) it starts from scratch and
// drops that line, as --resume drops lines past its checkpoint: epoch 0 is there once.
TEST(TrainCliTest, ResumeAutoContinuesARunAndDropsLinesWithoutACheckpoint) {
  std::string out;
  const std::string toy = "--model toy --train-samples 64 --test-samples 32 --no-progress ";
  const std::string ck = tmp_path("resume_auto_run");
  ASSERT_EQ(run(toy + "--epochs 1 --checkpoint-dir " + ck, &out), 0) << out;
  EXPECT_EQ(run(toy + "--epochs 2 --resume auto --checkpoint-dir " + ck, &out), 0) << out;
  EXPECT_TRUE(has(out, "resumed from " + ck)) << out;

  const std::string orphan = tmp_path("resume_auto_orphan");
  ::mkdir(orphan.c_str(), 0755);
  std::ofstream(orphan + "/metrics.jsonl") << "{\"epoch\":0,\"train_loss\":9}\n";
  EXPECT_EQ(run(toy + "--epochs 1 --resume auto --checkpoint-dir " + orphan, &out), 0) << out;
  EXPECT_TRUE(has(out, "starting from scratch")) << out;
  const std::string metrics = file_bytes(orphan + "/metrics.jsonl");
  EXPECT_EQ(metrics.find("\"train_loss\":9"), std::string::npos) << metrics;
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 1) << metrics;
}

// Replaces the optimizer state of the checkpoint in `dir` by `state` (its metadata kept) and
// records the new file's size in the manifest, without checksums: a set consistent but for the
// state, as a program other than dpe might write it.
void put_optimizer_state(const std::string& dir, const dpe::StateDict& state) {
  const std::string path = dir + "/optimizer.safetensors";
  dpe::SafetensorsSaveOptions options;
  options.metadata = dpe::read_safetensors(path).metadata;
  dpe::save_safetensors(path, state, options);
  nlohmann::json manifest = nlohmann::json::parse(file_bytes(dir + "/checkpoint.json"));
  manifest["files"]["optimizer.safetensors"] = file_bytes(path).size();
  manifest.erase("crc32");
  std::ofstream(dir + "/checkpoint.json", std::ios::trunc) << manifest.dump();
}

// An AdamW state that cannot be resumed from is refused when the checkpoint is read, with 3,
// naming optimizer.safetensors and the key: a step of 0 (it failed at the first step with
// "adam_step: step counts from 1", exit 1), INT64_MAX (it wrapped), no step (PyTorch's Adam
// fails at step() on such a state; this took it for step 1), a key without a parameter index
// (it failed with "train: stoul", exit 1).
TEST(TrainCliTest, ABadOptimizerStateExitsWith3NamingTheFileAndTheKey) {
  std::string out;
  const std::string ck = tmp_path("bad_optimizer_state");
  const std::string adamw =
      "--model toy --optimizer adamw --train-samples 64 --test-samples 32 --no-progress "
      "--max-steps-per-epoch 1 ";
  ASSERT_EQ(run(adamw + "--checkpoint-dir " + ck, &out), 0) << out;
  const std::string path = ck + "/optimizer.safetensors";
  const dpe::StateDict good = dpe::read_safetensors(path).tensors;
  const std::string good_bytes = file_bytes(path), good_manifest = file_bytes(ck + "/checkpoint.json");
  auto with = [&](const std::string& key, const dpe::Tensor& value) {
    dpe::StateDict state;
    for (const auto& [k, v] : good) {
      if (k != key) state.emplace_back(k, v);
    }
    if (value.defined()) state.emplace_back(key, value);
    return state;
  };
  auto step = [](int64_t v) { return dpe::Tensor::from_vector(std::vector<int64_t>{v}, {}); };
  const std::vector<std::pair<dpe::StateDict, std::string>> cases{
      {with("state.0.step", step(0)), "'state.0.step' is 0"},
      {with("state.0.step", step(INT64_MAX)), "'state.0.step' is 9223372036854775807"},
      {with("state.0.step", dpe::Tensor()), "no 'state.0.step'"},
      {with("state.x.step", step(1)), "'state.x.step'"},
  };
  for (const auto& [state, expected] : cases) {
    put_optimizer_state(ck, state);
    EXPECT_EQ(run(adamw + "--epochs 2 --resume --checkpoint-dir " + ck, &out), 3) << out;
    EXPECT_TRUE(has(out, path)) << out;
    EXPECT_TRUE(has(out, expected)) << expected << ": " << out;
    EXPECT_FALSE(has(out, "epoch 1:")) << "it trained: " << out;
    std::ofstream(path, std::ios::trunc | std::ios::binary) << good_bytes;
    std::ofstream(ck + "/checkpoint.json", std::ios::trunc) << good_manifest;
  }
  EXPECT_EQ(run(adamw + "--epochs 2 --resume --checkpoint-dir " + ck, &out), 0) << out;
}

// SIGKILL at spread-out moments of a run whose epochs (one toy step each) take milliseconds, so
// that kills land in checkpoint writes too: every time, the next --resume finds one whole set
// (design note "checkpoint set" in tools/train_lib/trainer.h) and gets as far as being killed
// itself.
TEST(TrainCliTest, AKilledRunAlwaysResumes) {
  std::string out;
  const std::string ck = tmp_path("killed_runs");
  const std::string toy = "--model toy --train-samples 64 --test-samples 32 --no-progress";
  ASSERT_EQ(run(toy + " --epochs 2 --checkpoint-dir " + ck, &out), 0) << out;
  for (int i = 0; i < 10; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execl(g_train.c_str(), g_train.c_str(), "--model", "toy", "--train-samples", "64",
              "--test-samples", "32", "--no-progress", "--epochs", "1000000", "--resume",
              "--checkpoint-dir", ck.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::usleep(static_cast<useconds_t>(200000 + 61000 * i));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Still running when killed: it did not stop on a checkpoint it could not read.
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "kill " << i << ": exited with " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  EXPECT_EQ(run(toy + " --epochs 1 --resume --checkpoint-dir " + ck, &out), 0) << out;
  EXPECT_TRUE(has(out, "resumed from " + ck + "/checkpoint.json after epoch")) << out;
  const int epoch = std::atoi(out.c_str() + out.find("after epoch") + 12);
  std::printf("after 10 kills the checkpoint holds epoch %d\n", epoch);
  EXPECT_GT(epoch, 1) << out;
  // metrics.jsonl holds exactly the checkpoint's epochs, one line each.
  std::ifstream log(ck + "/metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(log, l);) {
    EXPECT_TRUE(has(l, "\"epoch\":" + std::to_string(lines) + ",")) << lines << ": " << l;
    ++lines;
  }
  EXPECT_EQ(lines, epoch + 1);
}

// The loss of "epoch N: train loss X, ..." in `out`; -1 when there is no such line.
double train_loss(const std::string& out, int epoch) {
  const std::string key = "epoch " + std::to_string(epoch) + ": train loss ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::atof(out.c_str() + at + key.size());
}

// resnet-tiny (models/resnet.h, one input channel for Fashion-MNIST's grayscale images) trains
// from the command line as convnet does, in single and dp mode: SGD by default, the loss falls
// from the first short epoch to the third, and the checkpoint holds a 1-channel conv1.
TEST(TrainCliTest, ResnetTinyTrainsOnFashionMnist) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_TRUE(has(out, "resnet-tiny")) << out;
  const std::string resnet =
      "--model resnet-tiny --epochs 3 --train-samples 800 --max-steps-per-epoch 8 "
      "--batch-size 50 --test-samples 200 --no-progress";
  for (const char* mode : {"single", "dp --devices 2"}) {
    const std::string ck = tmp_path(std::string("resnet_tiny_") + mode[0]);
    EXPECT_EQ(run(resnet + " --mode " + mode + " --checkpoint-dir " + ck, &out), 0) << out;
    EXPECT_TRUE(has(out, "training resnet-tiny, mode " + std::string(mode).substr(0, 2))) << out;
    EXPECT_TRUE(has(out, "sgd lr 0.01")) << out;
    EXPECT_TRUE(has(out, "test accuracy")) << out;
    const double first = train_loss(out, 0), last = train_loss(out, 2);
    EXPECT_GT(first, 0) << out;
    EXPECT_GT(last, 0) << out;
    EXPECT_LT(last, first) << mode << ": " << out;
    // The safetensors header (JSON after an 8-byte length) names conv1's [8, 1, 7, 7] weight.
    std::ifstream in(ck + "/model.safetensors", std::ios::binary);
    std::string header(4096, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header.size()));
    EXPECT_TRUE(has(header, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[8,1,7,7]"))
        << header.substr(0, 300);
  }
}

// --channels-last lays the image batches out NHWC: the ConvNet trains to the same losses (up to
// the convolution kernels' rounding), on one device and under DataParallel.
TEST(TrainCliTest, ChannelsLastTrainsAsContiguous) {
  const std::string convnet =
      "--model convnet --epochs 1 --train-samples 400 --max-steps-per-epoch 4 --batch-size 50 "
      "--test-samples 100 --no-progress";
  for (const char* mode : {"single", "dp --devices 2"}) {
    std::string plain, cl;
    ASSERT_EQ(run(convnet + " --mode " + mode, &plain), 0) << plain;
    ASSERT_EQ(run(convnet + " --mode " + mode + " --channels-last", &cl), 0) << cl;
    const double want = train_loss(plain, 0), got = train_loss(cl, 0);
    EXPECT_GT(want, 0) << plain;
    EXPECT_NEAR(got, want, 1e-4 * want) << mode << ": " << cl;
  }
}

// A run that fails (here a diverging loss) exits with 1.
TEST(TrainCliTest, AFailedRunExitsWith1) {
  std::string out;
  EXPECT_EQ(run("--model toy --train-samples 512 --test-samples 32 --no-progress --lr 1e30", &out),
            1)
      << out;
  EXPECT_TRUE(has(out, "non-finite loss")) << out;
}

// --precision bf16: the Mlp and the ConvNet train under autocast(bfloat16) to the float32 run's
// loss within bfloat16's rounding.
TEST(TrainCliTest, PrecisionBf16TrainsAnMlpAndAConvNetAsFloat32Does) {
  const auto train_loss = [](const std::string& out) {
    const size_t at = out.find("train loss ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 11));
  };
  for (const char* model : {"mlp", "convnet"}) {
    const std::string args = std::string("--model ") + model +
                             " --train-samples 512 --test-samples 128 --max-steps 4 "
                             "--batch-size 128 --no-progress --precision ";
    std::string fp32, bf16;
    ASSERT_EQ(run(args + "fp32", &fp32), 0) << fp32;
    ASSERT_EQ(run(args + "bf16", &bf16), 0) << bf16;
    const double a = train_loss(fp32), b = train_loss(bf16);
    ASSERT_GT(a, 0) << fp32;
    EXPECT_NEAR(b, a, 0.02 * a) << model << "\n" << bf16;
    EXPECT_TRUE(has(bf16, "test accuracy")) << bf16;
    // Said once, whatever the CPU: where the 16-bit products run.
    EXPECT_TRUE(has(bf16, "precision bf16: forward and loss under autocast(bfloat16); ")) << bf16;
    EXPECT_TRUE(has(bf16, "16-bit products on AMX") || has(bf16, "16-bit products emulated"))
        << bf16;
    EXPECT_FALSE(has(fp32, "autocast")) << fp32;
  }
}

// --precision fp16: autocast(float16) with a GradScaler, whose state is checkpointed beside the
// optimizer's (PyTorch's keys under grad_scaler.), so a resumed run ends with the weights and
// the scale of an uninterrupted one, bit for bit. FSDP is refused: it would need a sharded
// scaler.
TEST(TrainCliTest, PrecisionFp16ScalesTheLossAndResumesBitForBit) {
  const std::string args =
      "--model mlp --train-samples 256 --test-samples 64 --batch-size 64 --no-progress "
      "--precision fp16 --checkpoint-dir ";
  std::string out;
  const std::string whole = tmp_path("fp16_whole"), split = tmp_path("fp16_split");
  ASSERT_EQ(run(args + whole + " --epochs 2", &out), 0) << out;
  ASSERT_EQ(run(args + split + " --epochs 1", &out), 0) << out;
  ASSERT_EQ(run(args + split + " --epochs 2 --resume", &out), 0) << out;
  EXPECT_TRUE(has(out, "resumed from")) << out;
  const dpe::StateDict a = dpe::read_safetensors(whole + "/model.safetensors").tensors;
  const dpe::StateDict b = dpe::read_safetensors(split + "/model.safetensors").tensors;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
  }
  float scale[2] = {0, 0};
  int i = 0;
  for (const std::string& dir : {whole, split}) {
    for (const auto& [k, v] : dpe::read_safetensors(dir + "/optimizer.safetensors").tensors) {
      if (k == "grad_scaler.scale") scale[i] = v.item();
    }
    ++i;
  }
  EXPECT_GT(scale[0], 0.0f);  // saved
  EXPECT_EQ(scale[0], scale[1]);
  EXPECT_EQ(run("--mode fsdp --precision fp16 --model mlp --max-steps 1", &out), 2) << out;
  EXPECT_TRUE(has(out, "sharded GradScaler")) << out;
}

// Out of memory while the data loads is a failed run (1), as anywhere else, not a data error (3):
// the data is fine, the machine (here a 1 MiB cap on host:0) is too small for it.
TEST(TrainCliTest, OutOfMemoryWhileLoadingDataExitsWith1) {
  std::string out;
  EXPECT_EQ(run("--model mlp --train-samples 64 --test-samples 64 --max-steps 1 --no-progress", &out,
                "DPE_HOST_DEVICE_MEMORY=1MiB"),
            1)
      << out;
  EXPECT_TRUE(has(out, "out of memory on host:0")) << out;
}

// The lines of `dir`/metrics.jsonl.
std::vector<std::string> metrics_lines(const std::string& dir) {
  std::ifstream log(dir + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(log, l);) lines.push_back(l);
  return lines;
}

// --max-steps counts optimizer steps over the whole run, as Hugging Face's max_steps: two epochs
// of 8 steps with --max-steps 3 stop after exactly 3 steps, in epoch 0; --max-steps-per-epoch
// cuts each epoch instead; a resumed run counts the steps before its checkpoint.
TEST(TrainCliTest, MaxStepsIsATotalOverTheRun) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_TRUE(has(out, "Hugging Face's max_steps")) << out;
  EXPECT_TRUE(has(out, "--max-steps-per-epoch")) << out;
  const std::string toy =
      "--model toy --train-samples 64 --batch-size 8 --test-samples 32 --no-progress";
  const std::string total = tmp_path("max_steps_total");
  EXPECT_EQ(run(toy + " --epochs 2 --max-steps 3 --checkpoint-dir " + total, &out), 0) << out;
  EXPECT_TRUE(has(out, "3 steps in all")) << out;
  EXPECT_TRUE(has(out, "epoch 0: ")) << out;
  EXPECT_FALSE(has(out, "epoch 1: ")) << out;
  std::vector<std::string> lines = metrics_lines(total);
  ASSERT_EQ(lines.size(), 1u) << out;
  EXPECT_TRUE(has(lines[0], "\"steps\":3,")) << lines[0];
  EXPECT_TRUE(has(lines[0], "\"global_step\":3,")) << lines[0];

  const std::string each = tmp_path("max_steps_per_epoch");
  EXPECT_EQ(run(toy + " --epochs 2 --max-steps-per-epoch 3 --checkpoint-dir " + each, &out), 0)
      << out;
  lines = metrics_lines(each);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_TRUE(has(lines[1], "\"steps\":3,")) << lines[1];
  EXPECT_TRUE(has(lines[1], "\"global_step\":6,")) << lines[1];

  const std::string resumed = tmp_path("max_steps_resumed");
  EXPECT_EQ(run(toy + " --epochs 1 --checkpoint-dir " + resumed, &out), 0) << out;
  EXPECT_EQ(run(toy + " --max-steps 11 --resume --checkpoint-dir " + resumed, &out), 0) << out;
  EXPECT_TRUE(has(out, "resumed from")) << out;
  EXPECT_TRUE(has(out, "epoch 1: ")) << out;
  lines = metrics_lines(resumed);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_TRUE(has(lines[1], "\"steps\":3,")) << lines[1];
  EXPECT_TRUE(has(lines[1], "\"global_step\":11,")) << lines[1];
  EXPECT_EQ(run(toy + " --max-steps 11 --resume --checkpoint-dir " + resumed, &out), 0) << out;
  EXPECT_TRUE(has(out, "nothing to train: 11 steps done, --max-steps 11")) << out;
}

using dpe::test::free_port;

// --rdzv-timeout: rank 0 of 2 alone gives up after the flag's 1 s (a run failure: exit 1) and
// names the rank it waited for.
TEST(TrainCliTest, RdzvTimeoutBoundsTheRendezvous) {
  std::string out;
  const std::string env = "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(free_port());
  EXPECT_EQ(run("--mode ddp --rdzv-timeout 1 " + kToy, &out, env), 1) << out;
  EXPECT_TRUE(has(out, "rendezvous timed out after 1000 ms")) << out;
  EXPECT_TRUE(has(out, "rank 1 of 2 has not reached the store")) << out;
}

// The same DDP job over the two host process groups: 2 ranks under mpirun (--backend auto picks
// mpi there) and 2 ranks over Gloo started as the launcher would. A sum of two floats does not
// depend on the order, so every printed loss and accuracy is the same.
TEST(TrainCliTest, DdpOverMpiTrainsAsDdpOverGloo) {
  const std::string args =
      "--mode ddp --model toy --train-samples 400 --test-samples 64 --epochs 2 --no-progress";
  std::string mpi;
  const int rc =
      dpe::test::run_tool("mpirun", "--oversubscribe --bind-to none -np 2 " + g_train + " " + args,
                          &mpi, dpe::test::mpirun_env() + " DPE_HOST_DEVICES=1");
  ASSERT_EQ(rc, 0) << mpi;
  EXPECT_TRUE(has(mpi, "mode ddp (2 process(es))")) << mpi;
  const std::string env =
      "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
      " DPE_HOST_DEVICES=1";
  std::string gloo;
  const std::string both = "(RANK=0 LOCAL_RANK=0 " + env + " " + g_train + " " + args +
                           " & RANK=1 LOCAL_RANK=1 " + env + " " + g_train + " " + args +
                           " > /dev/null 2>&1; wait)";
  ASSERT_EQ(dpe::test::run_tool(both, "", &gloo), 0) << gloo;
  const auto epochs = [](const std::string& out) {
    std::string lines;
    for (size_t at = out.find("epoch 0:"); at != std::string::npos;
         at = out.find("epoch ", at + 1)) {
      if (out.compare(at, 6, "epoch ") == 0 && out.find(':', at) < out.find('\n', at)) {
        const std::string line = out.substr(at, out.find('\n', at) - at);
        lines += line.substr(0, line.rfind(", ")) + "\n";  // without samples/s
      }
    }
    return lines;
  };
  EXPECT_FALSE(epochs(mpi).empty()) << mpi;
  EXPECT_EQ(epochs(mpi), epochs(gloo)) << "mpi:\n" << mpi << "\ngloo:\n" << gloo;
  // The runs above take the buckets as the gradients (--gradient-as-bucket-view defaults to true:
  // the linear layers write into them, divided by 2 in the GEMM, exact for two ranks). With
  // PyTorch's default, copies into and out of the buckets, every figure is the same again; the
  // flag alone means true.
  for (const char* view : {" --gradient-as-bucket-view false", " --gradient-as-bucket-view"}) {
    std::string other;
    ASSERT_EQ(dpe::test::run_tool(
                  "mpirun", "--oversubscribe --bind-to none -np 2 " + g_train + " " + args + view,
                  &other, dpe::test::mpirun_env() + " DPE_HOST_DEVICES=1"),
              0)
        << other;
    EXPECT_EQ(epochs(other), epochs(mpi)) << view << ":\n" << other << "\nmpi:\n" << mpi;
  }
  // --ddp-comm-hook bf16: the same job with 16-bit buckets on the wire trains to the float32
  // buckets' losses within bfloat16's rounding (2%), over MPI.
  std::string hooked;
  ASSERT_EQ(dpe::test::run_tool("mpirun",
                                "--oversubscribe --bind-to none -np 2 " + g_train + " " + args +
                                    " --ddp-comm-hook bf16",
                                &hooked, dpe::test::mpirun_env() + " DPE_HOST_DEVICES=1"),
            0)
      << hooked;
  const auto train_loss = [](const std::string& out) {
    const size_t at = out.find("epoch 1: train loss ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 20));
  };
  ASSERT_GT(train_loss(mpi), 0) << mpi;
  EXPECT_NEAR(train_loss(hooked), train_loss(mpi), 0.02 * train_loss(mpi)) << hooked;
}

// --device cuda where no CUDA device exists (this machine, or a build without CUDA): exit 2, and
// the message says how many were needed and why there are none. Skipped where a GPU is present.
TEST(TrainCliTest, CudaWithoutAGpuIsAUsageError) {
  if (::access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "a GPU is present";
  std::string out;
  EXPECT_EQ(run("--device cuda --model toy", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 1 CUDA device") != std::string::npos) << out;
  EXPECT_EQ(run("--device cuda --mode dp --devices 2 --model toy", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 2 CUDA device") != std::string::npos) << out;
  // CUDA devices have 16-bit kernels: --precision is no reason to refuse, the missing GPU is.
  EXPECT_EQ(run("--device cuda --precision bf16 --model toy", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 1 CUDA device") != std::string::npos) << out;
  EXPECT_EQ(run("--mode ddp --backend nccl --model toy", &out), 2);  // NCCL reduces CUDA tensors
  EXPECT_TRUE(out.find("--backend nccl needs --device cuda") != std::string::npos) << out;
  EXPECT_EQ(run("--device gpu", &out), 2);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_cli_test <path to tools/train>\n");
    return 2;
  }
  g_train = argv[1];
  return RUN_ALL_TESTS();
}
