#include "engine/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_map>

#include "engine/core/error.h"

namespace dpe {

namespace {

constexpr std::string_view kNewlinePiece = Tokenizer::kNewline;

// Feeds SentencePiece's trainer one line of the documents at a time, without a temporary file.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& documents) : documents_(documents) {
    advance();
  }
  bool done() const override { return doc_ >= documents_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  // Moves to the next non-empty line.
  void advance() {
    while (doc_ < documents_.size()) {
      const std::string& doc = documents_[doc_];
      if (pos_ > doc.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      size_t end = doc.find('\n', pos_);
      if (end == std::string::npos) end = doc.size();
      line_.assign(doc, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }

  const std::vector<std::string>& documents_;
  size_t doc_ = 0;
  size_t pos_ = 0;
  std::string line_;
};

// Newlines become kNewline, and a run of them is followed by a space unless one is there.
std::string escape_newlines(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out.push_back(text[i]);
      continue;
    }
    out.append(kNewlinePiece);
    const bool last_of_run = i + 1 == text.size() || text[i + 1] != '\n';
    if (last_of_run && i + 1 < text.size() && text[i + 1] != ' ') out.push_back(' ');
  }
  return out;
}

// The inverse: kNewline becomes '\n', and the one space after a run of them is dropped.
std::string unescape_newlines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, kNewlinePiece.size(), kNewlinePiece) != 0) {
      out.push_back(text[i++]);
      continue;
    }
    while (text.compare(i, kNewlinePiece.size(), kNewlinePiece) == 0) {
      out.push_back('\n');
      i += kNewlinePiece.size();
    }
    if (i < text.size() && text[i] == ' ') ++i;
  }
  return out;
}

}  // namespace

std::string Tokenizer::TrainOptions::flags() const {
  std::ostringstream out;
  // character_coverage 1.0 keeps every character of the training text; byte_fallback turns
  // characters it never saw into UTF-8 byte pieces instead of <unk>; a line may be as long as
  // a reflowed Jargon File paragraph.
  out << "--model_type=" << model_type << " --vocab_size=" << vocab_size
      << " --character_coverage=1.0 --byte_fallback=true --max_sentence_length=65536"
      << " --user_defined_symbols=" << kNewline;
  if (!hard_vocab_limit) out << " --hard_vocab_limit=false";
  return out.str();
}

Tokenizer::Tokenizer(std::string serialized, std::string source)
    : serialized_(std::move(serialized)), source_(std::move(source)) {
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(serialized_);
  DPE_CHECK(status.ok(), "Tokenizer: " << source_ << " is not a SentencePiece model: "
                                       << status.ToString());
  processor_ = std::move(processor);
}

Tokenizer Tokenizer::train(const std::vector<std::string>& documents, const TrainOptions& options,
                           int num_threads) {
  DPE_CHECK(!documents.empty(), "Tokenizer::train: no documents");
  LineIterator lines(documents);
  std::string serialized;
  const std::string args = options.flags() + " --num_threads=" + std::to_string(num_threads) +
                           " --minloglevel=2";
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &serialized);
  if (!status.ok()) {
    // SentencePiece says "Vocabulary size is smaller than required_chars. 200 vs 299."
    const std::string message = status.ToString();
    const size_t at = message.find("smaller than required_chars. ");
    long long asked = 0, needed = 0;
    if (at != std::string::npos &&
        std::sscanf(message.c_str() + at + 29, "%lld vs %lld", &asked, &needed) == 2) {
      DPE_THROW("Tokenizer::train: a vocabulary of " << asked << " is too small for this text: it "
                                                     << "needs at least " << needed
                                                     << " pieces (256 byte pieces, the special "
                                                        "pieces and one per character it uses)");
    }
    DPE_THROW("Tokenizer::train (" << options.flags() << "): " << message);
  }
  return Tokenizer(std::move(serialized), "(trained in memory)");
}

Tokenizer Tokenizer::load(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    DPE_THROW("Tokenizer: cannot open " << path << ": " << std::strerror(errno));
  }
  DPE_CHECK(S_ISREG(st.st_mode), "Tokenizer: " << path << " is not a regular file");
  DPE_CHECK(st.st_size <= kMaxTokenizerModelBytes,
            "Tokenizer: " << path << " is " << st.st_size << " bytes, over the "
                          << kMaxTokenizerModelBytes
                          << "-byte limit of a model file (not a SentencePiece model)");
  std::ifstream in(path, std::ios::binary);
  DPE_CHECK(in, "Tokenizer: cannot open " << path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DPE_CHECK(!bytes.empty(), "Tokenizer: " << path << " is empty, not a SentencePiece model");
  return Tokenizer(std::move(bytes), path);
}

void Tokenizer::save(const std::string& path) const {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DPE_CHECK(out, "Tokenizer: cannot write " << tmp << ": " << std::strerror(errno));
    out.write(serialized_.data(), static_cast<std::streamsize>(serialized_.size()));
    out.close();
    DPE_CHECK(out, "Tokenizer: cannot write " << tmp << ": " << std::strerror(errno));
  }
  DPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
            "Tokenizer: cannot rename " << tmp << " to " << path << ": " << std::strerror(errno));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(escape_newlines(text), &ids);
  DPE_CHECK(status.ok(), "Tokenizer (" << source_ << "): encode failed: " << status.ToString());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  const int64_t n = vocab_size();
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    DPE_CHECK(ids[i] >= 0 && ids[i] < n, "Tokenizer (" << source_ << "): id " << ids[i]
                                                       << " at position " << i
                                                       << " is outside the vocabulary of " << n);
    narrow.push_back(static_cast<int>(ids[i]));
  }
  std::string text;
  const auto status = processor_->Decode(narrow, &text);
  DPE_CHECK(status.ok(), "Tokenizer (" << source_ << "): decode failed: " << status.ToString());
  return unescape_newlines(text);
}

int64_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }

int64_t Tokenizer::eos_id() const { return processor_->eos_id(); }

std::string Tokenizer::piece(int64_t id) const {
  DPE_CHECK(id >= 0 && id < vocab_size(),
            "Tokenizer (" << source_ << "): id " << id << " is outside the vocabulary");
  return processor_->IdToPiece(static_cast<int>(id));
}

}  // namespace dpe
