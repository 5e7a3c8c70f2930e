// //tools:train on the user's own data: --text (a file or a folder of UTF-8 text) for the
// language models, its tokenizer trained once and reused, and its errors (exit 3 naming the file,
// exit 2 for --text with a model that is not a language model); --data-dir with another IDX set
// of 28x28 images (MNIST's names and format), and the error for images of another size.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/tools/run_tool.h"

namespace {

using dpe::test::has;

std::string g_train;

int run(const std::string& args, std::string* output) {
  return dpe::test::run_tool(g_train, args, output);
}

std::string tmp_path(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

std::string make_dir(const std::string& name) {
  const std::string dir = tmp_path(name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// About `bytes` of English-like prose in paragraphs, the same every time for the same seed.
std::string prose(size_t bytes, uint64_t seed) {
  const std::vector<std::string> subjects = {"The old sailor", "A quiet girl", "The captain",
                                             "Her brother",    "The stranger", "Nobody"};
  const std::vector<std::string> verbs = {"looked at", "remembered", "carried",
                                          "followed",  "painted",    "forgot"};
  const std::vector<std::string> objects = {"the grey harbour", "a letter from home",
                                            "the lighthouse",   "the long road north",
                                            "an empty boat",    "the winter sky"};
  std::string text;
  uint64_t x = seed;
  auto next = [&](size_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>((x >> 33) % n);
  };
  for (int sentence = 1; text.size() < bytes; ++sentence) {
    text += subjects[next(subjects.size())] + " " + verbs[next(verbs.size())] + " " +
            objects[next(objects.size())] + (next(4) == 0 ? "!" : ".");
    text += sentence % 5 == 0 ? "\n\n" : sentence % 2 == 0 ? "\n" : " ";
  }
  return text;
}

// A tiny gpt-small run on --text `path`, its tokenizer of `vocab` pieces cached in `cache`.
std::string tiny_text_run(const std::string& path, const std::string& cache, int vocab = 320) {
  return "--model gpt-small --text " + path +
         " --context 16 --batch-size 2 --max-steps 2 --train-samples 8 --test-samples 2 "
         "--no-progress --vocab-size " +
         std::to_string(vocab) + " --cache-dir " + cache;
}

TEST(TrainDataCliTest, TextFileTrainsAndTheSecondRunReusesItsTokenizer) {
  const std::string dir = make_dir("text_file");
  const std::string book = dir + "/book.txt";
  write_file(book, prose(20000, 1));
  const std::string cache = dir + "/cache";
  std::string out;
  ASSERT_EQ(run(tiny_text_run(book, cache), &out), 0) << out;
  EXPECT_TRUE(has(out, "tokenizer: trained on")) << out;
  EXPECT_TRUE(has(out, "cached at " + cache + "/text-")) << out;
  EXPECT_TRUE(has(out, "text " + book + " (1 file, ")) << out;
  EXPECT_TRUE(has(out, "val perplexity")) << out;
  EXPECT_EQ(run(tiny_text_run(book, cache), &out), 0) << out;
  EXPECT_FALSE(has(out, "trained on")) << out;
  EXPECT_TRUE(has(out, "tokenizer: reused " + cache + "/text-")) << out;
  EXPECT_TRUE(has(out, "val perplexity")) << out;
  // Other text is another tokenizer.
  write_file(book, prose(20000, 2));
  EXPECT_EQ(run(tiny_text_run(book, cache), &out), 0) << out;
  EXPECT_TRUE(has(out, "tokenizer: trained on")) << out;
  // The default 32 000 pieces are more than this text holds: fewer, and the run says so.
  EXPECT_EQ(run("--model gpt-small --text " + book +
                    " --context 16 --batch-size 2 --max-steps 1 --train-samples 2 "
                    "--test-samples 2 --no-progress --cache-dir " +
                    cache,
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "fewer than the 32000 asked for")) << out;
}

TEST(TrainDataCliTest, AFolderOfTextTrainsSkippingHiddenFiles) {
  const std::string dir = make_dir("text_folder");
  make_dir("text_folder/chapters");
  make_dir("text_folder/.git");
  write_file(dir + "/chapters/01.txt", prose(6000, 3));
  write_file(dir + "/chapters/02.txt", prose(6000, 4));
  write_file(dir + "/.git/index", std::string("DIRC\0\0\0\2", 8));  // binary, but hidden
  std::string out;
  ASSERT_EQ(run(tiny_text_run(dir + "/chapters", dir + "/cache"), &out), 0) << out;
  EXPECT_TRUE(has(out, "text " + dir + "/chapters (2 files, ")) << out;
}

TEST(TrainDataCliTest, TextErrorsNameTheFile) {
  const std::string dir = make_dir("text_errors");
  const std::string cache = dir + "/cache";
  std::string out;
  EXPECT_EQ(run(tiny_text_run(dir + "/missing.txt", cache), &out), 3) << out;
  EXPECT_TRUE(has(out, dir + "/missing.txt: No such file or directory")) << out;

  write_file(dir + "/empty.txt", "");
  EXPECT_EQ(run(tiny_text_run(dir + "/empty.txt", cache), &out), 3) << out;
  EXPECT_TRUE(has(out, dir + "/empty.txt holds no text")) << out;

  write_file(dir + "/short.txt", "Too short to learn from.\n");
  EXPECT_EQ(run(tiny_text_run(dir + "/short.txt", cache), &out), 3) << out;
  EXPECT_TRUE(has(out, "too few for a validation split")) << out;
  EXPECT_TRUE(has(out, "about 5 KB of text")) << out;

  write_file(dir + "/model.bin", std::string("\x7f"
                                             "ELF\2\1\1\0\0",
                                             9));
  EXPECT_EQ(run(tiny_text_run(dir + "/model.bin", cache), &out), 3) << out;
  EXPECT_TRUE(has(out, dir + "/model.bin is binary, not text: a NUL byte at offset 7")) << out;

  const std::string folder = make_dir("text_errors/folder");
  write_file(folder + "/a.txt", prose(6000, 5));
  write_file(folder + "/b.txt", prose(100, 6) + "caf\xe9\n");  // Latin-1
  EXPECT_EQ(run(tiny_text_run(folder, cache), &out), 3) << out;
  EXPECT_TRUE(has(out, folder + "/b.txt is not UTF-8 text: byte 0xe9 at offset ")) << out;

  write_file(dir + "/book.txt", prose(20000, 7));
  EXPECT_EQ(run(tiny_text_run(dir + "/book.txt", cache, 100), &out), 3) << out;
  EXPECT_TRUE(has(out, "a vocabulary of 100 is too small for this text: it needs at least")) << out;

  // --text is the language models' data: a usage error with any other model, nothing read.
  for (const char* model : {"convnet", "toy"}) {
    EXPECT_EQ(run("--model " + std::string(model) + " --text " + dir + "/book.txt", &out), 2)
        << out;
    EXPECT_TRUE(has(out, "--text is the language models' data (gpt-small, gpt2)")) << out;
  }
}

// The most bytes of --text read (--max-text-bytes, 64 MiB by default): past it the run stops
// with 3 before training anything, naming the file, the limit and the flag.
TEST(TrainDataCliTest, TextOverTheLimitStopsNamingTheFileTheLimitAndTheFlag) {
  const std::string dir = make_dir("text_limit");
  write_file(dir + "/book.txt", prose(20000, 8));
  std::string out;
  EXPECT_EQ(run(tiny_text_run(dir + "/book.txt", dir + "/cache") + " --max-text-bytes 10000", &out),
            3)
      << out;
  EXPECT_TRUE(has(out, dir + "/book.txt holds more than 10000 bytes of text, the limit")) << out;
  EXPECT_TRUE(has(out, "--max-text-bytes raises it")) << out;
  EXPECT_FALSE(has(out, "tokenizer:")) << out;
  EXPECT_EQ(run(tiny_text_run(dir + "/book.txt", dir + "/cache") + " --max-text-bytes 0", &out), 2)
      << out;
  EXPECT_TRUE(has(out, "--max-text-bytes")) << out;
  EXPECT_EQ(run(tiny_text_run(dir + "/book.txt", dir + "/cache") + " --max-text-bytes 30000", &out),
            0)
      << out;
}

using Bytes = std::vector<unsigned char>;

void put_u32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<unsigned char>(v >> shift));
}

// An IDX set of `count` side x side images: label i % 10, drawn as a bright bar at row 2 * label
// on a dark, noisy background, which an MLP tells apart in a few steps.
void write_idx_set(const std::string& dir, const std::string& prefix, uint32_t count, uint32_t side,
                   const std::string& suffix) {
  Bytes images, labels;
  put_u32(images, 2051);
  put_u32(images, count);
  put_u32(images, side);
  put_u32(images, side);
  put_u32(labels, 2049);
  put_u32(labels, count);
  uint64_t x = count;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t label = i % 10;
    labels.push_back(static_cast<unsigned char>(label));
    for (uint32_t r = 0; r < side; ++r) {
      for (uint32_t c = 0; c < side; ++c) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const bool bar = r / 2 == label + 2;
        images.push_back(static_cast<unsigned char>(bar ? 200 + (x >> 60) : (x >> 59)));
      }
    }
  }
  for (const auto& [name, bytes] :
       {std::pair<std::string, const Bytes*>{"-images-idx3-ubyte", &images},
        {"-labels-idx1-ubyte", &labels}}) {
    std::ofstream out(dir + "/" + prefix + name + suffix, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes->data()),
              static_cast<std::streamsize>(bytes->size()));
  }
}

// Any set of 28x28 images with labels 0-9 under MNIST's file names (which are Fashion-MNIST's)
// trains, packed (.gz names) or unpacked; images of another size are named in the error.
TEST(TrainDataCliTest, AnotherIdxSetOf28x28ImagesTrains) {
  const std::string mlp =
      "--model mlp --batch-size 50 --epochs 2 --lr 0.05 --no-progress --data-dir ";
  std::string out;
  for (const char* suffix : {"", ".gz"}) {  // plain bytes: the reader takes gzip or not
    const std::string dir = make_dir(std::string("bars") + (*suffix ? "_gz" : ""));
    write_idx_set(dir, "train", 1000, 28, suffix);
    write_idx_set(dir, "t10k", 200, 28, suffix);
    ASSERT_EQ(run(mlp + dir, &out), 0) << out;
    const size_t at = out.find("epoch 1: ");
    ASSERT_NE(at, std::string::npos) << out;
    const size_t acc = out.find("test accuracy ", at);
    ASSERT_NE(acc, std::string::npos) << out;
    EXPECT_GT(std::atof(out.c_str() + acc + 14), 80.0) << out;
  }
  const std::string big = make_dir("bars_32");
  write_idx_set(big, "train", 20, 32, ".gz");
  write_idx_set(big, "t10k", 20, 32, ".gz");
  EXPECT_EQ(run(mlp + big, &out), 3) << out;
  EXPECT_TRUE(has(out, big + "/t10k-images-idx3-ubyte.gz holds 32x32 images, expected 28x28") ||
              has(out, big + "/train-images-idx3-ubyte.gz holds 32x32 images, expected 28x28"))
      << out;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_data_cli_test <path to tools/train>\n");
    return 2;
  }
  g_train = argv[1];
  return RUN_ALL_TESTS();
}
