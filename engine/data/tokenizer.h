// Tokenizer: text to token ids and back with a SentencePiece model (Debian's libsentencepiece),
// trained here as BPE on the language-model corpus's training split (token_cache.h caches it).
//
// Newlines carry structure in the corpus (poems, dialogue, paragraphs), but SentencePiece
// normalizes them to spaces. So encode() writes each newline as kNewline (U+2424 "␤"), a
// user-defined piece (always exactly one token), followed by a space before the next word: that
// word then gets the same "▁word" token it gets at the start of a training line. decode() undoes
// both. Round trips are exact for normalized text (text_corpus.h) whose characters NFKC keeps.
//
// Threading contract: immutable after construction; encode/decode may run on any thread at once
// (SentencePieceProcessor's encoding is const). Copies share the loaded model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace dpe {

// The largest model file Tokenizer::load reads: a model of 1 M pieces is about 30 MB.
inline constexpr int64_t kMaxTokenizerModelBytes = int64_t{256} << 20;

class Tokenizer {
 public:
  static constexpr const char* kNewline = "\xE2\x90\xA4";  // U+2424 SYMBOL FOR NEWLINE

  struct TrainOptions {
    int64_t vocab_size = 32000;  // at least 32 k, so the logits weigh what real LMs' do
    std::string model_type = "bpe";
    // false: a text too small for vocab_size pieces gets as many as BPE finds in it (fewer)
    // instead of an error (SentencePiece's --hard_vocab_limit). The flag is in flags() only
    // when false, so models trained with the default keep their cache key.
    bool hard_vocab_limit = true;
    // The trainer's options as SentencePiece flags: the exact command (spm_train plus these and
    // --input) that makes the same model, and part of the cache key. Threads are not in it:
    // the pieces do not depend on them (checked: 1 and 2 threads give the same vocabulary).
    std::string flags() const;
  };

  // Trains on `documents`, one SentencePiece sentence per line. Deterministic for the same
  // documents and options. Throws dpe::Error with SentencePiece's message on failure; when
  // vocab_size is below what the text needs (the 256 byte pieces, the special pieces and one per
  // character), the message says how many that is.
  static Tokenizer train(const std::vector<std::string>& documents, const TrainOptions& options,
                         int num_threads = 2);
  // Loads a .model file. Throws dpe::Error naming `path` when it is missing, over
  // kMaxTokenizerModelBytes, or not a model.
  static Tokenizer load(const std::string& path);
  // Writes the model (the same bytes spm_train writes) to `path`, atomically (temp + rename).
  void save(const std::string& path) const;

  std::vector<int64_t> encode(std::string_view text) const;
  // Throws dpe::Error naming the id when one is outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const;
  // The end-of-sequence id: the separator after every document in a token stream.
  int64_t eos_id() const;
  std::string piece(int64_t id) const;
  // Where the model came from: a path, or "(trained in memory)".
  const std::string& source() const { return source_; }

 private:
  Tokenizer(std::string serialized, std::string source);

  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  std::string serialized_;  // the model's bytes, for save()
  std::string source_;
};

}  // namespace dpe
