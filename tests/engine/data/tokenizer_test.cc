#include "engine/data/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/core/error.h"
#include "tests/engine/data/text_test_util.h"

namespace dpe {
namespace {

using testing_text::error_of;
using testing_text::scratch_dir;
using testing_text::small_documents;
using testing_text::write_file;

Tokenizer::TrainOptions tiny_options() {
  Tokenizer::TrainOptions options;
  options.vocab_size = 400;  // 256 byte pieces, 3 specials, the newline piece, then merges
  return options;
}

const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::train(small_documents(), tiny_options(), 1);
  return tokenizer;
}

TEST(Tokenizer, RoundTripsTextWithNewlinesAndBlankLines) {
  const Tokenizer& tok = tiny_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 400);
  for (const std::string& text :
       {std::string("The cat reads a book every day."),
        std::string("The old man likes the answer.\nThen nothing at all!"),
        std::string("A dog finds some bread.\n\n-- Anonymous, number 12"),
        std::string("Unseen words: zebra quixotic 42, caf\xC3\xA9.")}) {
    const std::vector<int64_t> ids = tok.encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Tokenizer, NewlineIsOneTokenAndLearnedWordsAreSinglePieces) {
  const Tokenizer& tok = tiny_tokenizer();
  const std::vector<int64_t> ids = tok.encode("cat\ndog");
  const int64_t newlines = std::count_if(ids.begin(), ids.end(), [&](int64_t id) {
    return tok.piece(id) == Tokenizer::kNewline;
  });
  EXPECT_EQ(newlines, 1);
  // The word after a newline gets the same piece as at the start of a line.
  EXPECT_EQ(tok.encode("dog").back(), ids.back());
  EXPECT_EQ(tok.encode("The").size(), 1u);
  EXPECT_EQ(tok.piece(tok.encode("The")[0]), "\xE2\x96\x81The");  // "▁The"
  EXPECT_GE(tok.eos_id(), 0);
  EXPECT_EQ(tok.piece(tok.eos_id()), "</s>");
}

TEST(Tokenizer, TrainingIsDeterministic) {
  const Tokenizer again = Tokenizer::train(small_documents(), tiny_options(), 2);
  const std::string text = "Every hacker writes the program.\nThe computer loses a book.";
  EXPECT_EQ(again.encode(text), tiny_tokenizer().encode(text));
  for (int64_t id = 0; id < again.vocab_size(); ++id) {
    ASSERT_EQ(again.piece(id), tiny_tokenizer().piece(id)) << id;
  }
}

TEST(Tokenizer, SavedModelLoadsAndEncodesTheSame) {
  const std::string path = scratch_dir("tokenizer") + "/tiny.model";
  tiny_tokenizer().save(path);
  const Tokenizer loaded = Tokenizer::load(path);
  EXPECT_EQ(loaded.source(), path);
  EXPECT_EQ(loaded.vocab_size(), tiny_tokenizer().vocab_size());
  const std::string text = "My friend likes a fortune cookie.\n\nThen nothing!";
  EXPECT_EQ(loaded.encode(text), tiny_tokenizer().encode(text));
}

TEST(Tokenizer, MissingEmptyOrCorruptModelNamesTheFile) {
  const std::string dir = scratch_dir("tokenizer");
  std::string msg = error_of([&] { Tokenizer::load(dir + "/missing.model"); });
  EXPECT_NE(msg.find(dir + "/missing.model"), std::string::npos) << msg;

  write_file(dir + "/empty.model", "");
  msg = error_of([&] { Tokenizer::load(dir + "/empty.model"); });
  EXPECT_NE(msg.find(dir + "/empty.model"), std::string::npos) << msg;

  write_file(dir + "/corrupt.model", "this is not a protobuf, just text \xff\xff\xff\xff");
  msg = error_of([&] { Tokenizer::load(dir + "/corrupt.model"); });
  EXPECT_NE(msg.find(dir + "/corrupt.model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a SentencePiece model"), std::string::npos) << msg;
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const std::string msg = error_of([] { tiny_tokenizer().decode({5, 400}); });
  EXPECT_NE(msg.find("id 400"), std::string::npos) << msg;
}

TEST(Tokenizer, FlagsAreTheTrainerCommandAndOmitThreads) {
  const std::string flags = Tokenizer::TrainOptions{}.flags();
  EXPECT_NE(flags.find("--model_type=bpe"), std::string::npos) << flags;
  EXPECT_NE(flags.find("--vocab_size=32000"), std::string::npos) << flags;
  EXPECT_EQ(flags.find("threads"), std::string::npos) << flags;
  // The soft vocabulary limit is in the flags (hence the cache key) only when asked for.
  EXPECT_EQ(flags.find("hard_vocab_limit"), std::string::npos) << flags;
  Tokenizer::TrainOptions soft;
  soft.hard_vocab_limit = false;
  EXPECT_NE(soft.flags().find("--hard_vocab_limit=false"), std::string::npos) << soft.flags();
}

// A vocabulary below the byte pieces, the specials and the text's characters: the message says
// how many pieces the text needs.
TEST(Tokenizer, TooSmallAVocabularySaysWhatTheTextNeeds) {
  Tokenizer::TrainOptions options;
  options.vocab_size = 100;
  const std::string msg = error_of([&] { Tokenizer::train(small_documents(), options, 1); });
  EXPECT_NE(msg.find("a vocabulary of 100 is too small for this text: it needs at least "),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace dpe
