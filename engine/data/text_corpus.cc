#include "engine/data/text_corpus.h"

#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace dpe {

namespace {

// "64 MiB" beside the bytes for a whole number of MiB: limits as messages show them.
std::string shown_limit(uint64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    s += " (" + std::to_string(bytes >> 20) + " MiB)";
  }
  return s;
}

// The whole file, gunzipped when it is gzip (zlib reads plain files transparently), counted as it
// is inflated: more than kMaxCorpusFileBytes stops the read there.
std::string read_text_file(const std::string& path, const char* what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    DPE_THROW(what << ": cannot open " << path << ": " << std::strerror(errno));
  }
  DPE_CHECK(S_ISREG(st.st_mode), what << ": " << path << " is not a regular file");
  gzFile file = gzopen(path.c_str(), "rb");
  DPE_CHECK(file != nullptr, what << ": cannot open " << path);
  std::string text;
  char buffer[1 << 16];
  int got = 0;
  while ((got = gzread(file, buffer, sizeof buffer)) > 0) {
    if (text.size() + static_cast<uint64_t>(got) > kMaxCorpusFileBytes) {
      gzclose(file);
      DPE_THROW(what << ": " << path << " holds (or inflates to) more than "
                     << shown_limit(kMaxCorpusFileBytes)
                     << ", the limit of a corpus file: it is not the Debian package's file (a few "
                        "MB); reinstall the package");
    }
    text.append(buffer, static_cast<size_t>(got));
  }
  int err = Z_OK;
  const std::string message = got < 0 ? gzerror(file, &err) : "";
  gzclose(file);
  DPE_CHECK(got == 0, what << ": " << path << " is corrupt: " << message);
  return text;
}

// The lines of `text` one at a time, without a vector of them (a text of newlines would take 16
// bytes of views per byte): for (std::string_view line; lines.next(&line);). The last line is the
// text after the last newline, "" when the text ends with one; line_number() is the 1-based
// number of the line last returned.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view* line) {
    if (start_ > text_.size()) return false;
    size_t end = text_.find('\n', start_);
    if (end == std::string_view::npos) end = text_.size();
    *line = text_.substr(start_, end - start_);
    start_ = end + 1;
    ++number_;
    return true;
  }
  int64_t line_number() const { return number_; }

 private:
  std::string_view text_;
  size_t start_ = 0;
  int64_t number_ = 0;
};

// Throws naming `path` and the line a document starts on once it has grown past
// kMaxCorpusDocumentBytes.
void check_document_size(const char* what, const std::string& path, uint64_t bytes,
                         int64_t first_line) {
  DPE_CHECK(bytes <= kMaxCorpusDocumentBytes,
            what << ": " << path << ": the document from line " << first_line
                 << " on is longer than " << shown_limit(kMaxCorpusDocumentBytes)
                 << ", the limit of a corpus document: it is not the Debian package's file; "
                    "reinstall the package");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "   :gobble: vt." (the indented head of a lexicon entry), "Chapter 3. ..." or "Appendix A. ...".
bool starts_jargon_document(std::string_view line) {
  if (starts_with(line, "Chapter ") || starts_with(line, "Appendix ")) return true;
  return starts_with(line, "   :") && line.find(':', 4) != std::string_view::npos;
}

// A table-of-contents line or a heading: one short line with no punctuation that ends a sentence
// or marks a lexicon entry.
bool is_heading(const std::vector<std::string>& paragraph_lines) {
  if (paragraph_lines.size() != 1) return false;
  const std::string& line = paragraph_lines[0];
  if (std::count(line.begin(), line.end(), ' ') >= 8) return false;
  return line.find_first_of(".!?:;\"") == std::string::npos;
}

}  // namespace

std::string normalize_document(std::string_view text) {
  // Characters first: overstrikes, control characters and tabs.
  std::string chars;
  chars.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\b') {
      if (!chars.empty() && chars.back() != '\n') chars.pop_back();
    } else if (c == '\t') {
      chars.push_back(' ');
    } else if (c == '\n' || u >= 0x20) {
      if (u != 0x7f) chars.push_back(c);
    }
  }
  // Then lines: trimmed, inner runs of spaces collapsed, at most one blank line in a row.
  std::string out;
  out.reserve(chars.size());
  bool blank = false;  // a blank line since the last text line
  Lines lines(chars);
  for (std::string_view line; lines.next(&line);) {
    line = trim(line);
    if (line.empty()) {
      blank = true;
      continue;
    }
    if (!out.empty()) out.append(blank ? 2 : 1, '\n');
    blank = false;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == ' ' && line[i - 1] == ' ') continue;  // i > 0: the line is trimmed
      out.push_back(line[i]);
    }
  }
  return out;
}

std::vector<std::string> read_fortune_file(const std::string& path) {
  const std::string text = read_text_file(path, "read_fortune_file");
  std::vector<std::string> documents;
  std::string current;
  int64_t first_line = 1;  // of the fortune being read
  auto flush = [&] {
    std::string doc = normalize_document(current);
    if (!doc.empty()) documents.push_back(std::move(doc));
    current.clear();
  };
  Lines lines(text);
  for (std::string_view line; lines.next(&line);) {
    if (line == "%") {
      flush();
      first_line = lines.line_number() + 1;
    } else {
      current.append(line);
      current.push_back('\n');
      check_document_size("read_fortune_file", path, current.size(), first_line);
    }
  }
  flush();
  return documents;
}

std::vector<std::string> read_fortune_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  DPE_CHECK(d != nullptr, "read_fortune_dir: cannot open " << dir << ": " << std::strerror(errno)
                                                           << " (Debian package: fortunes)");
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.find('.') != std::string::npos) continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
  }
  ::closedir(d);
  DPE_CHECK(!names.empty(), "read_fortune_dir: " << dir << " holds no fortune files");
  std::sort(names.begin(), names.end());
  std::vector<std::string> documents;
  for (const std::string& name : names) {
    std::vector<std::string> docs = read_fortune_file(dir + "/" + name);
    documents.insert(documents.end(), std::make_move_iterator(docs.begin()),
                     std::make_move_iterator(docs.end()));
  }
  return documents;
}

std::vector<std::string> read_jargon_file(const std::string& path) {
  const std::string text = read_text_file(path, "read_jargon_file");
  std::vector<std::string> documents;
  std::string current;                   // paragraphs of the document being read
  std::vector<std::string> paragraph;    // lines of the paragraph being read
  bool started = false;                  // the front matter before "Chapter 1." is skipped
  uint64_t bytes = 0;                    // of the document being read, paragraph lines included
  int64_t first_line = 1;                // where it starts
  auto end_paragraph = [&] {
    if (!paragraph.empty() && !is_heading(paragraph)) {
      std::string joined;
      for (const std::string& line : paragraph) joined += (joined.empty() ? "" : " ") + line;
      current += (current.empty() ? "" : "\n") + joined;
    }
    paragraph.clear();
  };
  auto end_document = [&] {
    end_paragraph();
    std::string doc = normalize_document(current);
    if (!doc.empty()) documents.push_back(std::move(doc));
    current.clear();
    bytes = 0;
  };
  Lines lines(text);
  for (std::string_view line; lines.next(&line);) {
    if (starts_jargon_document(line)) {
      end_document();
      started = true;
      first_line = lines.line_number();
    }
    if (!started) continue;
    const std::string_view content = trim(line);
    if (content.empty()) {
      end_paragraph();
    } else {
      paragraph.emplace_back(content);
      bytes += content.size() + 1;
      check_document_size("read_jargon_file", path, bytes, first_line);
    }
  }
  end_document();
  DPE_CHECK(!documents.empty(), "read_jargon_file: " << path
                                                     << " holds no chapter (is it the Jargon File?)");
  return documents;
}

std::vector<std::string> load_language_model_corpus(const std::string& fortunes_dir,
                                                    const std::string& jargon_file) {
  std::vector<std::string> documents = read_fortune_dir(fortunes_dir);
  std::vector<std::string> jargon;
  try {
    jargon = read_jargon_file(jargon_file);
  } catch (const Error& e) {
    DPE_THROW(e.what() << " (Debian package: jargon-text)");
  }
  documents.insert(documents.end(), std::make_move_iterator(jargon.begin()),
                   std::make_move_iterator(jargon.end()));
  return documents;
}

TextSplit split_documents(const std::vector<std::string>& documents, int64_t validation_every) {
  DPE_CHECK(validation_every >= 2,
            "split_documents: validation_every must be at least 2, got " << validation_every);
  TextSplit split;
  for (size_t i = 0; i < documents.size(); ++i) {
    const bool validation = static_cast<int64_t>(i % validation_every) == validation_every - 1;
    (validation ? split.validation : split.train).push_back(documents[i]);
  }
  return split;
}

uint64_t corpus_checksum(const std::vector<std::string>& documents) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a offset basis
  auto mix = [&h](const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const std::string& doc : documents) {
    const uint64_t n = doc.size();
    mix(&n, sizeof n);  // lengths too, so ["ab"] and ["a", "b"] differ
    mix(doc.data(), doc.size());
  }
  return h;
}

uint64_t corpus_bytes(const std::vector<std::string>& documents) {
  uint64_t n = 0;
  for (const std::string& doc : documents) n += doc.size();
  return n;
}

}  // namespace dpe
