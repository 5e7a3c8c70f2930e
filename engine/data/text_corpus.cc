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

// The whole file, gunzipped when it is gzip (zlib reads plain files transparently).
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
  while ((got = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, got);
  int err = Z_OK;
  const std::string message = got < 0 ? gzerror(file, &err) : "";
  gzclose(file);
  DPE_CHECK(got == 0, what << ": " << path << " is corrupt: " << message);
  return text;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
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
  for (std::string_view line : split_lines(chars)) {
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
  auto flush = [&] {
    std::string doc = normalize_document(current);
    if (!doc.empty()) documents.push_back(std::move(doc));
    current.clear();
  };
  for (std::string_view line : split_lines(text)) {
    if (line == "%") {
      flush();
    } else {
      current.append(line);
      current.push_back('\n');
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
  };
  for (std::string_view line : split_lines(text)) {
    if (starts_jargon_document(line)) {
      end_document();
      started = true;
    }
    if (!started) continue;
    const std::string_view content = trim(line);
    if (content.empty()) {
      end_paragraph();
    } else {
      paragraph.emplace_back(content);
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
