#include "engine/data/token_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

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

constexpr const char* kRecordFormat = "dpe-token-cache-1";
constexpr int64_t kMaxRecordBytes = 64 << 10;  // a record is a few hundred bytes
constexpr int kMaxRecordBrackets = 4;          // and one object, no array: '{' and '[' counted

// The bytes of `path` when it is a regular file of at most `limit` bytes; nullopt otherwise.
std::optional<std::string> read_small_file(const std::string& path, int64_t limit) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > limit) {
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return bytes;
}

}  // namespace

std::optional<TokenCacheRecord> read_token_cache_record(const std::string& path) {
  const std::optional<std::string> text = read_small_file(path, kMaxRecordBytes);
  if (!text || std::count_if(text->begin(), text->end(), [](char c) {
                 return c == '{' || c == '[';
               }) > kMaxRecordBrackets) {
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", nlohmann::json()) != kRecordFormat) return std::nullopt;
  TokenCacheRecord r;
  for (const auto& [name, field] : {std::pair<const char*, std::string*>{"key", &r.key},
                                    {"corpus", &r.corpus},
                                    {"model", &r.model}}) {
    if (!j.contains(name) || !j[name].is_string()) return std::nullopt;
    *field = j[name].get<std::string>();
  }
  for (const auto& [name, field] : {std::pair<const char*, int64_t*>{"documents", &r.documents},
                                    {"vocab_size", &r.vocab_size},
                                    {"pieces", &r.pieces},
                                    {"train_tokens", &r.train_tokens},
                                    {"validation_tokens", &r.validation_tokens}}) {
    if (!j.contains(name) || !j[name].is_number_unsigned() ||
        j[name].get<uint64_t>() > (uint64_t{1} << 40)) {  // far above any real count
      return std::nullopt;
    }
    *field = static_cast<int64_t>(j[name].get<uint64_t>());
  }
  return r;
}

namespace {

void write_record(const std::string& path, const TokenCacheRecord& r) {
  const nlohmann::ordered_json j = {{"format", kRecordFormat},
                                    {"key", r.key},
                                    {"corpus", r.corpus},
                                    {"documents", r.documents},
                                    {"vocab_size", r.vocab_size},
                                    {"pieces", r.pieces},
                                    {"model", r.model},
                                    {"train_tokens", r.train_tokens},
                                    {"validation_tokens", r.validation_tokens}};
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DPE_CHECK(out, "load_tokenized_corpus: cannot write " << tmp << ": " << std::strerror(errno));
    out << j.dump(2) << "\n";
    out.close();
    DPE_CHECK(out, "load_tokenized_corpus: cannot write " << tmp << ": " << std::strerror(errno));
  }
  DPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "load_tokenized_corpus: cannot rename "
                                                              << tmp << " to " << path << ": "
                                                              << std::strerror(errno));
}

// The hex FNV-1a of the file's bytes; empty when it cannot be read.
std::string file_checksum(const std::string& path) {
  const std::optional<std::string> bytes = read_small_file(path, kMaxTokenizerModelBytes);
  return bytes ? hex64(fnv1a(*bytes)) : "";
}

// Why the entry whose record is `record_path` cannot be reused for `want` (design note "cache
// record"); empty when it can, except for the model's pieces, checked once it is loaded.
std::string stale_reason(const std::string& record_path, const std::string& model_path,
                         const TokenCacheRecord& want) {
  const std::optional<TokenCacheRecord> r = read_token_cache_record(record_path);
  if (!r) {
    return ::access(record_path.c_str(), F_OK) != 0
               ? "it has no record " + record_path +
                     " (an entry of an older dpe, or a write that was interrupted)"
               : "its record " + record_path + " is not one dpe wrote";
  }
  if (r->corpus != want.corpus || r->documents != want.documents) {
    return "it was trained on another text (" + std::to_string(r->documents) +
           " documents, checksum " + r->corpus + "; this run's: " +
           std::to_string(want.documents) + " documents, checksum " + want.corpus + ")";
  }
  if (r->vocab_size != want.vocab_size) {
    return "it was trained for a vocabulary of " + std::to_string(r->vocab_size) +
           ", this run asks for " + std::to_string(want.vocab_size);
  }
  if (r->key != want.key) {
    return "it was trained with other options (its record " + record_path + " is of key " +
           r->key + ", this run's is " + want.key + ")";
  }
  const std::string model = file_checksum(model_path);
  if (model != r->model) {
    return "the model changed since it was cached (checksum " +
           (model.empty() ? std::string("unreadable") : model) + ", its record says " + r->model +
           ")";
  }
  return "";
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

namespace {

// One corpus's entry in the cache: <cache_dir>/<name>-<key>.model, .tokens and .json (its record).
struct CacheEntry {
  std::string key;  // hex
  std::string model_path, tokens_path, record_path;
};

CacheEntry cache_entry(const std::string& cache_dir, const std::string& name, uint64_t key) {
  const std::string stem = cache_dir + "/" + name + "-" + hex64(key);
  return {hex64(key), stem + ".model", stem + ".tokens", stem + ".json"};
}

// Why the cached model cannot be reused for `want` ("absent" when there is none); empty when it
// can, and then it is in *cached. Reused only as recorded (design note "cache record").
std::string model_reuse_problem(const CacheEntry& e, const TokenCacheRecord& want,
                                const Tokenizer::TrainOptions& options,
                                std::optional<Tokenizer>* cached) {
  std::string why =
      exists(e.model_path) ? stale_reason(e.record_path, e.model_path, want) : "absent";
  if (!why.empty()) return why;
  *cached = Tokenizer::load(e.model_path);
  const std::optional<TokenCacheRecord> r = read_token_cache_record(e.record_path);
  const int64_t pieces = (*cached)->vocab_size();
  if (!r || pieces != r->pieces) {
    why = "it has " + std::to_string(pieces) + " pieces, its record says " +
          std::to_string(r ? r->pieces : 0);
  } else if (options.hard_vocab_limit ? pieces != options.vocab_size
                                      : pieces > options.vocab_size) {
    why = "it has " + std::to_string(pieces) + " pieces, this run asks for " +
          std::to_string(options.vocab_size);
  }
  return why;
}

// The cached model when it can be reused; otherwise (a model file without a record, or not the
// recorded one) one trained anew on `train_documents`, and the log says why. *trained says which.
Tokenizer cached_or_trained_tokenizer(const CacheEntry& e, const TokenCacheRecord& want,
                                      const std::vector<std::string>& train_documents,
                                      const Tokenizer::TrainOptions& options, std::ostream* log,
                                      bool* trained) {
  std::optional<Tokenizer> cached;
  const std::string why = model_reuse_problem(e, want, options, &cached);
  *trained = !why.empty();
  const auto start = std::chrono::steady_clock::now();
  if (*trained) {
    if (log && why != "absent") {
      *log << "tokenizer: not reusing " << e.model_path << ": " << why << "; training a new one\n";
    }
    ::unlink(e.record_path.c_str());  // the entry is rewritten: no record until it is whole
    Tokenizer::train(train_documents, options).save(e.model_path);
    if (log) {
      *log << "tokenizer: trained on " << train_documents.size() << " documents in "
           << seconds_since(start) << " s (" << options.flags() << "), cached at " << e.model_path
           << "\n";
    }
  }
  Tokenizer tokenizer = *trained ? Tokenizer::load(e.model_path) : std::move(*cached);
  if (log && !*trained) {
    *log << "tokenizer: reused " << e.model_path << " (" << tokenizer.vocab_size()
         << " pieces, trained by an earlier run on the same text)\n";
  }
  if (log && tokenizer.vocab_size() < options.vocab_size) {
    *log << "tokenizer: " << tokenizer.vocab_size() << " pieces, fewer than the "
         << options.vocab_size << " asked for: the text has no more to merge (more text gives "
         << "more); the model's vocabulary is " << tokenizer.vocab_size() << "\n";
  }
  return tokenizer;
}

// The token file of a reused model, into *train and *validation when it holds the recorded counts;
// false (and the log says why) when it must be encoded anew.
bool read_cached_tokens(const CacheEntry& e, const Tokenizer& tokenizer, std::ostream* log,
                        Tensor* train, Tensor* validation) {
  const std::optional<TokenCacheRecord> record = read_token_cache_record(e.record_path);
  if (!exists(e.tokens_path)) return false;
  // The size the record's counts give (the 24-byte header, then int32 ids), checked before
  // reading; the header's counts after.
  const uint64_t want_bytes =
      record ? 24 + 4 * static_cast<uint64_t>(record->train_tokens + record->validation_tokens) : 0;
  struct stat st {};
  const uint64_t bytes = ::stat(e.tokens_path.c_str(), &st) == 0 ? st.st_size : 0;
  if (record && bytes == want_bytes) {
    read_token_file(e.tokens_path, tokenizer.vocab_size(), train, validation);
  }
  const bool encode = !record || bytes != want_bytes || train->numel() != record->train_tokens ||
                      validation->numel() != record->validation_tokens;
  if (log && encode) {
    *log << "tokenizer: not reusing " << e.tokens_path << ": it is " << bytes << " bytes, not the "
         << want_bytes << " of its record's " << (record ? record->train_tokens : 0) << " + "
         << (record ? record->validation_tokens : 0) << " tokens; encoding anew\n";
  } else if (log) {
    *log << "tokenizer: reused " << e.tokens_path << " (" << train->numel() + validation->numel()
         << " tokens)\n";
  }
  return !encode;
}

// Encodes both splits into the token file, then writes the record: the entry is whole once it is
// there.
void encode_and_record(const CacheEntry& e, const Tokenizer& tokenizer, const TextSplit& split,
                       TokenCacheRecord record, std::ostream* log, Tensor* train,
                       Tensor* validation) {
  const auto encode_start = std::chrono::steady_clock::now();
  *train = encode_documents(tokenizer, split.train);
  *validation = encode_documents(tokenizer, split.validation);
  write_token_file(e.tokens_path, *train, *validation);
  if (log) {
    *log << "tokenizer: encoded " << train->numel() + validation->numel() << " tokens in "
         << seconds_since(encode_start) << " s, cached at " << e.tokens_path << "\n";
  }
  record.pieces = tokenizer.vocab_size();
  record.model = file_checksum(e.model_path);
  record.train_tokens = train->numel();
  record.validation_tokens = validation->numel();
  write_record(e.record_path, record);
}

}  // namespace

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
  const CacheEntry entry = cache_entry(cache_dir, name, key);
  make_dirs(cache_dir);

  TokenCacheRecord want;
  want.key = entry.key;
  want.corpus = hex64(corpus_checksum(documents));
  want.documents = static_cast<int64_t>(documents.size());
  want.vocab_size = options.vocab_size;
  bool trained = false;
  Tokenizer tokenizer =
      cached_or_trained_tokenizer(entry, want, split.train, options, log, &trained);
  // The token file goes with the recorded model: read when the model was reused and it holds
  // the recorded counts; re-encoded otherwise (a model just trained, a token file missing).
  Tensor train, validation;
  if (trained || !read_cached_tokens(entry, tokenizer, log, &train, &validation)) {
    encode_and_record(entry, tokenizer, split, want, log, &train, &validation);
  }
  TokenizedCorpus corpus{std::move(tokenizer), train, validation,
                         static_cast<int64_t>(split.train.size()),
                         static_cast<int64_t>(split.validation.size()),
                         corpus_bytes(documents), entry.key, entry.model_path, entry.tokens_path,
                         entry.record_path};
  corpus.trained = trained;
  return corpus;
}

}  // namespace dpe
