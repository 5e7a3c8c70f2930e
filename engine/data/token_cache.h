// The tokenized language-model corpus, cached on disk: the tokenizer trained on the training
// split and both splits' token streams.
//
// Training the 32 k BPE tokenizer takes about 20 s here and encoding the corpus a few seconds;
// both are deterministic functions of the documents, the trainer flags and kTokenCacheVersion,
// so the files are named by a key hashed from exactly those (a new Debian release of the corpus,
// new flags or a new version string make a new key, never a stale hit), after a name saying
// whose text it is: "lm-corpus" for the built-in corpus, "text" for a user's (--text), so the
// two never share a file:
//   <cache_dir>/<name>-<key>.model   the SentencePiece model (spm_encode reads it too)
//   <cache_dir>/<name>-<key>.tokens  "DPETOKS1", u64 train count, u64 validation count,
//                                    int32 ids: train then validation (native byte order)
//   <cache_dir>/<name>-<key>.json    the entry's record, written last: the key, the text's
//                                    checksum and document count, the vocabulary asked for, the
//                                    model's pieces and checksum, the token counts
// Files are written to a temporary name and renamed, so processes that race (DDP ranks) each
// leave a complete file.
//
// Design note "cache record": an entry is reused only when its record matches the run (the
// same key, text and vocabulary asked for) and its model is the one recorded (the same checksum
// and pieces). Anything else (no record: an older dpe's entry or an interrupted write; a record
// of another text or vocabulary; a model file replaced since) is not used: the run trains anew,
// rewrites the entry, and the log says which file and why ("tokenizer: not reusing ..."). A file
// that is corrupt (not a model, a token file of the wrong size) is still an error naming it.
//
// Threading contract: load_tokenized_corpus may run on several threads or processes at once.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/data/text_corpus.h"
#include "engine/data/tokenizer.h"
#include "engine/tensor/tensor.h"

namespace dpe {

// Bump when the corpus reader, the newline escaping or the token file format change meaning.
inline constexpr const char* kTokenCacheVersion = "lm-corpus-1";

// The cache names: the built-in corpus's and a user's text's.
inline constexpr const char* kCorpusCacheName = "lm-corpus";
inline constexpr const char* kTextCacheName = "text";

// $DPE_CACHE_DIR, else $XDG_CACHE_HOME/dpe, else $HOME/.cache/dpe.
std::string default_cache_dir();

struct TokenizedCorpus {
  Tokenizer tokenizer;
  // int64 [N] on host: each document's tokens followed by tokenizer.eos_id().
  Tensor train_tokens;
  Tensor validation_tokens;
  int64_t train_documents = 0;
  int64_t validation_documents = 0;
  uint64_t bytes = 0;       // of the documents (both splits)
  std::string key;          // the cache key (hex)
  std::string model_path;   // <cache_dir>/<name>-<key>.model
  std::string tokens_path;  // <cache_dir>/<name>-<key>.tokens
  std::string record_path;  // <cache_dir>/<name>-<key>.json
  bool trained = false;     // the tokenizer was trained now, not read from the cache
};

// Splits `documents` (split_documents), then loads the tokenizer and tokens from `cache_dir`, or
// trains, encodes and writes them there (creating the directory), under `name`. `log`, when
// given, hears what was trained, encoded or reused, why an entry was not reused (design note
// "cache record"), and when the tokenizer has fewer pieces than options.vocab_size
// (options.hard_vocab_limit false). Throws dpe::Error naming the file when a cached file is
// corrupt (delete it to rebuild) or cannot be written.
TokenizedCorpus load_tokenized_corpus(const std::vector<std::string>& documents,
                                      const std::string& cache_dir = default_cache_dir(),
                                      const Tokenizer::TrainOptions& options = {},
                                      std::ostream* log = nullptr,
                                      const std::string& name = kCorpusCacheName);

// What a cache entry is (design note "cache record"): the run's values when it is written, the
// file's when it is read.
struct TokenCacheRecord {
  std::string key;     // the cache key, 16 hex digits
  std::string corpus;  // corpus_checksum(documents), 16 hex digits
  int64_t documents = 0;
  int64_t vocab_size = 0;  // asked for (TrainOptions::vocab_size)
  int64_t pieces = 0;      // the model's
  std::string model;       // the FNV-1a of the model file's bytes, 16 hex digits
  int64_t train_tokens = 0;
  int64_t validation_tokens = 0;
};

// The record in `path` (<name>-<key>.json); nullopt when it is missing, over 64 KiB, holds more
// than 4 opening brackets (no deep nesting reaches the parser), is not JSON, or lacks a field of
// the right type (the counts are whole numbers up to 2^40). Never throws for its content.
std::optional<TokenCacheRecord> read_token_cache_record(const std::string& path);

// Each document's tokens followed by eos, as int64 [N] on host.
Tensor encode_documents(const Tokenizer& tokenizer, const std::vector<std::string>& documents);

// The token file format above; read checks the header, the size and every id against
// `vocab_size`, and names `path` in every error.
void write_token_file(const std::string& path, const Tensor& train, const Tensor& validation);
void read_token_file(const std::string& path, int64_t vocab_size, Tensor* train,
                     Tensor* validation);

}  // namespace dpe
