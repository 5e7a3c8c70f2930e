// prepare_lm_corpus: reads the language-model corpus from its Debian packages, trains or loads
// the cached 32 k BPE tokenizer, encodes both splits, and prints what a training run will see:
// sizes, where the cache is, and the validation split's unigram-baseline perplexity.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "engine/core/error.h"
#include "engine/data/text_corpus.h"
#include "engine/data/text_dataset.h"
#include "engine/data/token_cache.h"

int main(int argc, char** argv) {
  CLI::App app{"Prepare the language-model corpus: tokenizer, tokens, unigram baseline"};
  std::string fortunes = dpe::kFortunesDir;
  std::string jargon = dpe::kJargonFile;
  std::string cache_dir;
  int64_t vocab_size = 32000;
  app.add_option("--fortunes", fortunes, "directory of fortune files (package fortunes)");
  app.add_option("--jargon", jargon, "the Jargon File's text (package jargon-text)");
  // The spellings train uses; the underscore ones keep working.
  app.add_option("--cache-dir,--cache_dir", cache_dir,
                 "default: $DPE_CACHE_DIR, $XDG_CACHE_HOME/dpe or ~/.cache/dpe");
  app.add_option("--vocab-size,--vocab_size", vocab_size, "BPE vocabulary size");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::vector<std::string> docs = dpe::load_language_model_corpus(fortunes, jargon);
    dpe::Tokenizer::TrainOptions options;
    options.vocab_size = vocab_size;
    const dpe::TokenizedCorpus corpus = dpe::load_tokenized_corpus(
        docs, cache_dir.empty() ? dpe::default_cache_dir() : cache_dir, options, &std::cout);
    const double baseline = dpe::unigram_perplexity(
        corpus.train_tokens, corpus.validation_tokens, corpus.tokenizer.vocab_size());
    std::printf("corpus      %zu documents, %llu bytes (%s, %s)\n", docs.size(),
                static_cast<unsigned long long>(corpus.bytes), fortunes.c_str(), jargon.c_str());
    std::printf("split       %lld train / %lld validation documents (every 20th)\n",
                static_cast<long long>(corpus.train_documents),
                static_cast<long long>(corpus.validation_documents));
    std::printf("tokens      %lld train / %lld validation (vocabulary %lld, %.2f bytes/token)\n",
                static_cast<long long>(corpus.train_tokens.numel()),
                static_cast<long long>(corpus.validation_tokens.numel()),
                static_cast<long long>(corpus.tokenizer.vocab_size()),
                static_cast<double>(corpus.bytes) /
                    static_cast<double>(corpus.train_tokens.numel() +
                                        corpus.validation_tokens.numel()));
    std::printf("cache       %s\n            %s\n", corpus.model_path.c_str(),
                corpus.tokens_path.c_str());
    // NFKC normalization (e.g. ligatures, full-width forms) is the only loss a round trip may have.
    const dpe::TextSplit split = dpe::split_documents(docs);
    size_t exact = 0;
    for (const std::string& doc : split.validation) {
      exact += corpus.tokenizer.decode(corpus.tokenizer.encode(doc)) == doc;
    }
    std::printf("round trip  %zu of %zu validation documents decode to their exact text\n", exact,
                split.validation.size());
    std::printf("validation  unigram-baseline perplexity %.1f\n", baseline);
  } catch (const dpe::Error& e) {
    std::fprintf(stderr, "prepare_lm_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
