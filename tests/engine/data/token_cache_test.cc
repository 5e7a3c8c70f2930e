#include "engine/data/token_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

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
  options.vocab_size = 400;
  return options;
}

TEST(LoadTokenizedCorpus, TrainsOnceThenLoadsTheSameTokensFromTheCache) {
  const std::string dir = scratch_dir("cache") + "/nested/dpe";  // created on demand
  const std::vector<std::string> docs = small_documents();
  std::ostringstream first_log, second_log;
  const TokenizedCorpus first = load_tokenized_corpus(docs, dir, tiny_options(), &first_log);
  EXPECT_NE(first_log.str().find("trained"), std::string::npos) << first_log.str();
  EXPECT_EQ(::access(first.model_path.c_str(), R_OK), 0);
  EXPECT_EQ(::access(first.tokens_path.c_str(), R_OK), 0);
  EXPECT_EQ(first.model_path.rfind(dir + "/lm-corpus-" + first.key, 0), 0u) << first.model_path;
  EXPECT_EQ(first.train_documents, 57);  // 60 documents, every 20th for validation
  EXPECT_EQ(first.validation_documents, 3);
  EXPECT_EQ(first.bytes, corpus_bytes(docs));

  const TokenizedCorpus second = load_tokenized_corpus(docs, dir, tiny_options(), &second_log);
  // Nothing trained or encoded, and the log says what was reused.
  EXPECT_EQ(second_log.str().find("trained on"), std::string::npos) << second_log.str();
  EXPECT_EQ(second_log.str().find("encoded"), std::string::npos) << second_log.str();
  EXPECT_NE(second_log.str().find("tokenizer: reused " + first.model_path), std::string::npos)
      << second_log.str();
  EXPECT_NE(second_log.str().find("tokenizer: reused " + first.tokens_path), std::string::npos)
      << second_log.str();
  EXPECT_FALSE(second.trained);
  EXPECT_TRUE(first.trained);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.train_tokens.to_vector<int64_t>(), first.train_tokens.to_vector<int64_t>());
  EXPECT_EQ(second.validation_tokens.to_vector<int64_t>(),
            first.validation_tokens.to_vector<int64_t>());

  // The validation stream is the validation documents, each followed by eos.
  const TextSplit split = split_documents(docs);
  EXPECT_EQ(first.validation_tokens.to_vector<int64_t>(),
            encode_documents(first.tokenizer, split.validation).to_vector<int64_t>());
  const std::vector<int64_t> valid = first.validation_tokens.to_vector<int64_t>();
  EXPECT_EQ(valid.back(), first.tokenizer.eos_id());
  EXPECT_EQ(std::count(valid.begin(), valid.end(), first.tokenizer.eos_id()), 3);
}

TEST(LoadTokenizedCorpus, KeyChangesWithTheTextAndTheOptions) {
  const std::string dir = scratch_dir("cache");
  std::vector<std::string> docs = small_documents();
  const std::string key = load_tokenized_corpus(docs, dir, tiny_options()).key;
  docs[7] += " One more word.";
  EXPECT_NE(load_tokenized_corpus(docs, dir, tiny_options()).key, key);
  Tokenizer::TrainOptions options = tiny_options();
  options.vocab_size = 420;
  EXPECT_NE(load_tokenized_corpus(small_documents(), dir, options).key, key);
}

// A user's text (--text) is cached under its own name: the same documents as the built-in
// corpus's would share no file with it.
TEST(LoadTokenizedCorpus, TheNameKeepsTheCorpusAndAUsersTextApart) {
  const std::string dir = scratch_dir("cache");
  std::ostringstream corpus_log, text_log;
  const TokenizedCorpus corpus =
      load_tokenized_corpus(small_documents(), dir, tiny_options(), &corpus_log);
  const TokenizedCorpus text =
      load_tokenized_corpus(small_documents(), dir, tiny_options(), &text_log, kTextCacheName);
  EXPECT_EQ(corpus.model_path, dir + "/lm-corpus-" + corpus.key + ".model");
  EXPECT_EQ(text.model_path, dir + "/text-" + text.key + ".model");
  EXPECT_EQ(text.tokens_path, dir + "/text-" + text.key + ".tokens");
  EXPECT_TRUE(corpus.trained);
  EXPECT_TRUE(text.trained) << text_log.str();
  EXPECT_EQ(::access(text.tokens_path.c_str(), R_OK), 0);
  EXPECT_NE(text_log.str().find("trained on"), std::string::npos) << text_log.str();
}

// Without the hard limit, a text too small for the vocabulary asked for gets the pieces it has,
// and the log says so, on the run that trains and on the one that reuses the model.
TEST(LoadTokenizedCorpus, ASmallTextLowersTheVocabularyAndSaysSo) {
  const std::string dir = scratch_dir("cache");
  Tokenizer::TrainOptions options;
  options.vocab_size = 32000;
  options.hard_vocab_limit = false;
  for (int run = 0; run < 2; ++run) {
    std::ostringstream log;
    const TokenizedCorpus c =
        load_tokenized_corpus(small_documents(), dir, options, &log, kTextCacheName);
    EXPECT_EQ(c.trained, run == 0);
    EXPECT_GT(c.tokenizer.vocab_size(), 260);  // the byte pieces, the specials, some merges
    EXPECT_LT(c.tokenizer.vocab_size(), 1000);
    EXPECT_NE(log.str().find("fewer than the 32000 asked for"), std::string::npos) << log.str();
  }
  // With the hard limit (the default) SentencePiece refuses instead.
  options.hard_vocab_limit = true;
  EXPECT_NE(error_of([&] {
              load_tokenized_corpus(small_documents(), dir, options);
            }).find("Vocabulary size too high"),
            std::string::npos);
}

// A cached file that is not the one its record describes (design note "cache record" in
// token_cache.h) is made anew, and the log names it; a model that is corrupt although its record
// vouches for it is an error naming it.
TEST(LoadTokenizedCorpus, CorruptCachedFilesAreRebuiltOrNamedInTheError) {
  const std::string dir = scratch_dir("cache");
  const TokenizedCorpus corpus = load_tokenized_corpus(small_documents(), dir, tiny_options());
  write_file(corpus.tokens_path, "DPETOKS1 but then too short");
  std::ostringstream log;
  TokenizedCorpus again = load_tokenized_corpus(small_documents(), dir, tiny_options(), &log);
  EXPECT_FALSE(again.trained);
  EXPECT_NE(log.str().find("tokenizer: not reusing " + corpus.tokens_path), std::string::npos)
      << log.str();
  EXPECT_EQ(again.train_tokens.to_vector<int64_t>(), corpus.train_tokens.to_vector<int64_t>());

  std::ifstream in(corpus.record_path);
  const std::string record((std::istreambuf_iterator<char>(in)), {});
  write_file(corpus.model_path, "garbage");
  log.str("");
  again = load_tokenized_corpus(small_documents(), dir, tiny_options(), &log);
  EXPECT_TRUE(again.trained);
  EXPECT_NE(log.str().find("tokenizer: not reusing " + corpus.model_path + ": the model changed"),
            std::string::npos)
      << log.str();

  // A record that vouches for the garbage (its checksum put in): the model is read, and refused.
  write_file(corpus.model_path, "garbage");
  const size_t at = record.find("\"model\": \"") + 10;
  std::string forged = record;
  char fnv[17];
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : std::string("garbage")) h = (h ^ c) * 1099511628211ull;
  std::snprintf(fnv, sizeof fnv, "%016llx", static_cast<unsigned long long>(h));
  forged.replace(at, 16, fnv);
  write_file(corpus.record_path, forged);
  const std::string msg =
      error_of([&] { load_tokenized_corpus(small_documents(), dir, tiny_options()); });
  EXPECT_NE(msg.find(corpus.model_path), std::string::npos) << msg;
}

// Copies every file of the cache entry `from` (its .model, .tokens, and .json when there is one)
// to the names of the entry `to`, as a user copying caches between machines or a stray file
// might.
void copy_entry(const TokenizedCorpus& from, const TokenizedCorpus& to) {
  const std::string from_stem = from.model_path.substr(0, from.model_path.size() - 6);
  const std::string to_stem = to.model_path.substr(0, to.model_path.size() - 6);
  for (const char* ext : {".model", ".tokens", ".json"}) {
    std::ifstream in(from_stem + ext, std::ios::binary);
    if (!in) continue;
    std::ofstream out(to_stem + ext, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  }
}

// A cached model of another vocabulary than the run's (here one trained for 300 pieces, copied
// over the 400-piece entry) is not used: the run trains a new one, and the log says which file and
// both sizes. It used to be reused without a word.
TEST(LoadTokenizedCorpus, ACachedModelOfAnotherVocabularyIsRetrainedSayingWhy) {
  const std::string dir = scratch_dir("cache");
  const TokenizedCorpus first = load_tokenized_corpus(small_documents(), dir, tiny_options());
  Tokenizer::TrainOptions smaller = tiny_options();
  smaller.vocab_size = 300;
  const TokenizedCorpus other =
      load_tokenized_corpus(small_documents(), scratch_dir("other"), smaller);
  ASSERT_EQ(other.tokenizer.vocab_size(), 300);
  copy_entry(other, first);
  std::ostringstream log;
  const TokenizedCorpus again = load_tokenized_corpus(small_documents(), dir, tiny_options(), &log);
  EXPECT_TRUE(again.trained) << log.str();
  EXPECT_EQ(again.tokenizer.vocab_size(), 400);
  EXPECT_NE(log.str().find("tokenizer: not reusing " + first.model_path), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("300"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("400"), std::string::npos) << log.str();
  // The entry it wrote is whole again: the next run reuses it.
  std::ostringstream next_log;
  EXPECT_FALSE(load_tokenized_corpus(small_documents(), dir, tiny_options(), &next_log).trained)
      << next_log.str();
}

// An entry made from another text (copied under this text's key) is not used either: the run
// trains anew and the log names the file and says the text differs.
TEST(LoadTokenizedCorpus, ACacheEntryOfAnotherTextIsRetrainedSayingWhy) {
  const std::string dir = scratch_dir("cache");
  std::vector<std::string> docs = small_documents();
  const TokenizedCorpus a = load_tokenized_corpus(docs, dir, tiny_options());
  docs[3] += " A different text.";
  const TokenizedCorpus b = load_tokenized_corpus(docs, scratch_dir("elsewhere"), tiny_options());
  ASSERT_NE(a.key, b.key);
  copy_entry(a, b);  // a's files under b's names, beside b's
  std::ostringstream log;
  const TokenizedCorpus again =
      load_tokenized_corpus(docs, scratch_dir("elsewhere"), tiny_options(), &log);
  EXPECT_TRUE(again.trained) << log.str();
  EXPECT_NE(log.str().find("tokenizer: not reusing " + b.model_path), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("another text"), std::string::npos) << log.str();
  EXPECT_EQ(again.train_tokens.to_vector<int64_t>(), b.train_tokens.to_vector<int64_t>());
}

// The record reader takes only what load_tokenized_corpus writes, and says nullopt (never throws)
// for anything else: not JSON, another format, a field missing or of another type, counts past
// 2^40, nesting (refused before it is parsed), over 64 KiB.
TEST(TokenCacheRecord, TheReaderTakesOnlyWhatTheCacheWrites) {
  const std::string dir = scratch_dir("record");
  const TokenizedCorpus c = load_tokenized_corpus(small_documents(), dir, tiny_options());
  const std::optional<TokenCacheRecord> r = read_token_cache_record(c.record_path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key, c.key);
  EXPECT_EQ(r->vocab_size, 400);
  EXPECT_EQ(r->pieces, c.tokenizer.vocab_size());
  EXPECT_EQ(r->documents, 60);
  EXPECT_EQ(r->train_tokens, c.train_tokens.numel());
  std::ifstream in(c.record_path);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  const std::string path = dir + "/r.json";
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  for (const std::string& bad :
       {std::string("not json"), std::string(""), replaced("dpe-token-cache-1", "other-1"),
        replaced("\"pieces\"", "\"pieces_\""), replaced("\"vocab_size\": 400", "\"vocab_size\": \"400\""),
        replaced("\"vocab_size\": 400", "\"vocab_size\": -400"),
        replaced("\"vocab_size\": 400", "\"vocab_size\": 2199023255553"),
        replaced("\"vocab_size\": 400", "\"vocab_size\": [[[[[400]]]]]"),
        std::string(100000, '{'), good + std::string(70000, ' ')}) {
    write_file(path, bad);
    EXPECT_FALSE(read_token_cache_record(path).has_value()) << bad.substr(0, 200);
  }
  EXPECT_FALSE(read_token_cache_record(dir + "/missing.json").has_value());
}

TEST(TokenFile, RoundTripsAndRejectsIdsOutsideTheVocabulary) {
  const std::string path = scratch_dir("tokens") + "/t.tokens";
  const Tensor train = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 31999}, Shape{4});
  const Tensor valid = Tensor::from_vector(std::vector<int64_t>{5}, Shape{1});
  write_token_file(path, train, valid);
  Tensor t, v;
  read_token_file(path, 32000, &t, &v);
  EXPECT_EQ(t.to_vector<int64_t>(), train.to_vector<int64_t>());
  EXPECT_EQ(v.to_vector<int64_t>(), valid.to_vector<int64_t>());
  const std::string msg = error_of([&] { read_token_file(path, 100, &t, &v); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("31999"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { read_token_file(path + ".missing", 100, &t, &v); }).find(path),
            std::string::npos);
}

TEST(DefaultCacheDir, FollowsDpeCacheDirThenXdgThenHome) {
  const char* saved[3] = {std::getenv("DPE_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"),
                          std::getenv("HOME")};
  const std::string copies[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "",
                                 saved[2] ? saved[2] : ""};
  ::setenv("DPE_CACHE_DIR", "/a/dpe", 1);
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(default_cache_dir(), "/a/dpe");
  ::unsetenv("DPE_CACHE_DIR");
  EXPECT_EQ(default_cache_dir(), "/x/dpe");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/h/.cache/dpe");
  const char* names[3] = {"DPE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) {
    if (saved[i]) {
      ::setenv(names[i], copies[i].c_str(), 1);
    } else {
      ::unsetenv(names[i]);
    }
  }
}

}  // namespace
}  // namespace dpe
