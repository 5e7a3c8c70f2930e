#include "engine/data/token_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "engine/core/error.h"

namespace dpe {

namespace {

constexpr char kTokenMagic[8] = {'D', 'P', 'E', 'T', 'O', 'K', 'S', '1'};

uint64_t fnv1a(const std::string& s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex64(uint64_t v) {
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << v;
  return out.str();
}

// mkdir -p.
void make_dirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      DPE_THROW("load_tokenized_corpus: cannot create " << prefix << ": " << std::strerror(errno));
    }
  }
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string default_cache_dir() {
  if (const char* dir = std::getenv("DPE_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/dpe";
  const char* home = std::getenv("HOME");
  DPE_CHECK(home && *home, "default_cache_dir: none of DPE_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
  return std::string(home) + "/.cache/dpe";
}

Tensor encode_documents(const Tokenizer& tokenizer, const std::vector<std::string>& documents) {
  std::vector<int64_t> ids;
  for (const std::string& doc : documents) {
    const std::vector<int64_t> doc_ids = tokenizer.encode(doc);
    ids.insert(ids.end(), doc_ids.begin(), doc_ids.end());
    ids.push_back(tokenizer.eos_id());
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  return Tensor::from_vector(ids, Shape{n});
}

void write_token_file(const std::string& path, const Tensor& train, const Tensor& validation) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DPE_CHECK(out, "write_token_file: cannot write " << tmp << ": " << std::strerror(errno));
    out.write(kTokenMagic, sizeof kTokenMagic);
    const uint64_t counts[2] = {static_cast<uint64_t>(train.numel()),
                                static_cast<uint64_t>(validation.numel())};
    out.write(reinterpret_cast<const char*>(counts), sizeof counts);
    for (const Tensor* t : {&train, &validation}) {
      const Tensor host = t->contiguous();
      const int64_t* ids = host.data<int64_t>();
      std::vector<int32_t> narrow(ids, ids + host.numel());  // 32 k ids fit; half the bytes
      out.write(reinterpret_cast<const char*>(narrow.data()),
                static_cast<std::streamsize>(narrow.size() * sizeof(int32_t)));
    }
    out.close();
    DPE_CHECK(out, "write_token_file: cannot write " << tmp << ": " << std::strerror(errno));
  }
  DPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "write_token_file: cannot rename "
                                                              << tmp << " to " << path << ": "
                                                              << std::strerror(errno));
}

void read_token_file(const std::string& path, int64_t vocab_size, Tensor* train,
                     Tensor* validation) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  DPE_CHECK(in, "read_token_file: cannot open " << path << ": " << std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char magic[sizeof kTokenMagic] = {};
  uint64_t counts[2] = {0, 0};
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(counts), sizeof counts);
  DPE_CHECK(in && std::memcmp(magic, kTokenMagic, sizeof magic) == 0,
            "read_token_file: " << path << " is not a dpe token file (bad header); delete it to "
                                << "rebuild it");
  const uint64_t header = sizeof kTokenMagic + sizeof counts;
  const uint64_t max_count = (size - header) / sizeof(int32_t);
  DPE_CHECK(counts[0] <= max_count && counts[1] <= max_count &&
                header + (counts[0] + counts[1]) * sizeof(int32_t) == size,
            "read_token_file: " << path << " holds " << size << " bytes, but its header counts "
                                << counts[0] << " + " << counts[1]
                                << " tokens (truncated or corrupt); delete it to rebuild it");
  Tensor* outs[2] = {train, validation};
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> narrow(counts[k]);
    in.read(reinterpret_cast<char*>(narrow.data()),
            static_cast<std::streamsize>(narrow.size() * sizeof(int32_t)));
    DPE_CHECK(in, "read_token_file: " << path << " ends early");
    std::vector<int64_t> ids(narrow.begin(), narrow.end());
    for (size_t i = 0; i < ids.size(); ++i) {
      DPE_CHECK(ids[i] >= 0 && ids[i] < vocab_size,
                "read_token_file: " << path << " holds id " << ids[i] << " at " << i
                                    << ", outside the tokenizer's vocabulary of " << vocab_size
                                    << "; delete it to rebuild it");
    }
    *outs[k] = Tensor::from_vector(ids, Shape{static_cast<int64_t>(ids.size())});
  }
}

TokenizedCorpus load_tokenized_corpus(const std::vector<std::string>& documents,
                                      const std::string& cache_dir,
                                      const Tokenizer::TrainOptions& options, std::ostream* log,
                                      const std::string& name) {
  const TextSplit split = split_documents(documents);
  DPE_CHECK(!split.train.empty() && !split.validation.empty(),
            "load_tokenized_corpus: " << documents.size()
                                      << " documents are too few for a validation split");
  const uint64_t key = fnv1a(options.flags() + "|" + kTokenCacheVersion,
                             corpus_checksum(documents));
  DPE_CHECK(!name.empty() && name.find('/') == std::string::npos,
            "load_tokenized_corpus: bad cache name '" << name << "'");
  const std::string stem = cache_dir + "/" + name + "-" + hex64(key);
  const std::string model_path = stem + ".model";
  const std::string tokens_path = stem + ".tokens";
  make_dirs(cache_dir);

  const auto start = std::chrono::steady_clock::now();
  const bool trained = !exists(model_path);
  if (trained) {
    Tokenizer::train(split.train, options).save(model_path);
    if (log) {
      *log << "tokenizer: trained on " << split.train.size() << " documents in "
           << seconds_since(start) << " s (" << options.flags() << "), cached at " << model_path
           << "\n";
    }
  }
  Tokenizer tokenizer = Tokenizer::load(model_path);
  if (log && !trained) {
    *log << "tokenizer: reused " << model_path << " (" << tokenizer.vocab_size()
         << " pieces, trained by an earlier run on the same text)\n";
  }
  if (log && tokenizer.vocab_size() < options.vocab_size) {
    *log << "tokenizer: " << tokenizer.vocab_size() << " pieces, fewer than the "
         << options.vocab_size << " asked for: the text has no more to merge (more text gives "
         << "more); the model's vocabulary is " << tokenizer.vocab_size() << "\n";
  }
  Tensor train, validation;
  // A token file made with another model of the same key is impossible unless the model was
  // just retrained (the old one deleted): re-encode then.
  if (!trained && exists(tokens_path)) {
    read_token_file(tokens_path, tokenizer.vocab_size(), &train, &validation);
    if (log) {
      *log << "tokenizer: reused " << tokens_path << " (" << train.numel() + validation.numel()
           << " tokens)\n";
    }
  } else {
    const auto encode_start = std::chrono::steady_clock::now();
    train = encode_documents(tokenizer, split.train);
    validation = encode_documents(tokenizer, split.validation);
    write_token_file(tokens_path, train, validation);
    if (log) {
      *log << "tokenizer: encoded " << train.numel() + validation.numel() << " tokens in "
           << seconds_since(encode_start) << " s, cached at " << tokens_path << "\n";
    }
  }
  TokenizedCorpus corpus{std::move(tokenizer), train, validation,
                         static_cast<int64_t>(split.train.size()),
                         static_cast<int64_t>(split.validation.size()),
                         corpus_bytes(documents), hex64(key), model_path, tokens_path};
  corpus.trained = trained;
  return corpus;
}

}  // namespace dpe
