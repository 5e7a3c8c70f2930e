#include "engine/data/text_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "engine/core/error.h"
#include "engine/data/text_corpus.h"

namespace dpe {

namespace {

constexpr uint64_t kMaxDocumentBytes = 4096;
constexpr uint64_t kMinDocumentBytes = 256;
constexpr uint64_t kDocumentsWanted = 100;

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// Appends the files under folder `dir` to `out`, depth first in name order.
void list_folder(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  DPE_CHECK(d != nullptr,
            "read_text_files: cannot list the folder " << dir << ": " << std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (!hidden(name)) names.push_back(name);  // "." and ".." too
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    struct stat link {};
    struct stat target {};
    if (::lstat(path.c_str(), &link) != 0) continue;  // gone since readdir
    if (S_ISDIR(link.st_mode)) {
      list_folder(path, out);
    } else if (S_ISREG(link.st_mode)) {
      out.push_back(path);
    } else if (S_ISLNK(link.st_mode) && ::stat(path.c_str(), &target) == 0 &&
               S_ISREG(target.st_mode)) {
      out.push_back(path);  // links to folders are not followed: no cycles
    }
  }
}

// "N bytes", with "(M MiB)" after a whole number of MiB.
std::string shown_bytes(uint64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    s += " (" + std::to_string(bytes >> 20) + " MiB)";
  }
  return s;
}

// The file `path` of `root`, read in pieces of 1 MiB while `*left` (the bytes the limit
// `max_bytes` still allows) lasts; `*left` is what remains after it.
std::string read_file(const std::string& root, const std::string& path, uint64_t max_bytes,
                      uint64_t* left) {
  std::ifstream in(path, std::ios::binary);
  DPE_CHECK(in, "read_text_files: cannot read " << path << ": " << std::strerror(errno));
  std::string bytes;
  std::vector<char> piece(1 << 20);
  while (in.read(piece.data(), static_cast<std::streamsize>(piece.size())) || in.gcount() > 0) {
    const uint64_t got = static_cast<uint64_t>(in.gcount());
    if (got > *left) {
      throw TextLimitError("read_text_files: " + root + " holds more than " +
                           shown_bytes(max_bytes) + " of text, the limit" +
                           (root == path ? std::string() : " (" + path + " goes past it)"));
    }
    *left -= got;
    bytes.append(piece.data(), static_cast<size_t>(got));
  }
  DPE_CHECK(!in.bad(), "read_text_files: cannot read " << path << ": " << std::strerror(errno));
  return bytes;
}

// Throws naming `path` and the offset when `bytes` is not UTF-8 text, with a hint for the usual
// causes: a compressed file, UTF-16, a legacy 8-bit encoding.
void check_text(const std::string& path, std::string_view bytes) {
  auto starts = [&](std::string_view magic) { return bytes.substr(0, magic.size()) == magic; };
  DPE_CHECK(!starts("\x1f\x8b"),
            "read_text_files: " << path << " is gzip-compressed, not text: decompress it first");
  DPE_CHECK(!starts("\xff\xfe") && !starts("\xfe\xff"),
            "read_text_files: " << path << " is UTF-16 text; convert it to UTF-8 first (iconv -f "
                                << "UTF-16 -t UTF-8)");
  const size_t at = invalid_utf8_offset(bytes);
  if (at == bytes.size()) return;
  const long line = 1 + std::count(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(at), '\n');
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(bytes[at]));
  if (bytes[at] == '\0') {
    DPE_THROW("read_text_files: " << path << " is binary, not text: a NUL byte at offset " << at
                                  << " (line " << line << ")");
  }
  DPE_THROW("read_text_files: " << path << " is not UTF-8 text: byte " << byte << " at offset "
                                << at << " (line " << line
                                << ") starts no valid UTF-8 character (binary data, or another "
                                   "encoding: convert it first, e.g. iconv -f LATIN1 -t UTF-8)");
}

}  // namespace

size_t invalid_utf8_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xbf) {
    return k < n && p[k] >= lo && p[k] <= hi;
  };
  while (i < n) {
    const unsigned char c = p[i];
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xc2 && c <= 0xdf) {
      if (!cont(i + 1)) return i;
      i += 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      // E0: no overlongs (A0..BF); ED: no surrogates (80..9F).
      const unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
      if (!cont(i + 1, lo, hi) || !cont(i + 2)) return i;
      i += 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      // F0: no overlongs (90..BF); F4: nothing above U+10FFFF (80..8F).
      const unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
      if (!cont(i + 1, lo, hi) || !cont(i + 2) || !cont(i + 3)) return i;
      i += 4;
    } else {
      return i;  // a continuation byte, C0/C1 (overlong) or F5..FF
    }
  }
  return n;
}

uint64_t document_target_bytes(uint64_t total_bytes) {
  return std::clamp(total_bytes / kDocumentsWanted, kMinDocumentBytes, kMaxDocumentBytes);
}

std::vector<std::string> split_text(std::string_view text, uint64_t target) {
  DPE_CHECK(target > 0, "split_text: target must be positive");
  std::vector<std::string> pieces;
  auto add = [&](std::string_view piece) {
    while (!piece.empty() && piece.front() == '\n') piece.remove_prefix(1);
    while (!piece.empty() && piece.back() == '\n') piece.remove_suffix(1);
    if (!piece.empty()) pieces.emplace_back(piece);
  };
  size_t start = 0;
  while (text.size() - start > target) {
    const size_t end = start + target;  // the piece is text[start, cut)
    const size_t half = start + target / 2;
    size_t cut = std::string_view::npos;
    size_t skip = 0;  // separator bytes dropped after the cut
    // The last separator that starts in [half, end], searched for in that window only: from
    // `end` back to the text's start it made a text without paragraph breaks quadratic.
    for (std::string_view sep :
         {std::string_view("\n\n"), std::string_view("\n"), std::string_view(" ")}) {
      const size_t in_window = text.substr(half, end - half + sep.size()).rfind(sep);
      const size_t at = in_window == std::string_view::npos ? in_window : half + in_window;
      if (at != std::string_view::npos && at > start) {
        cut = at;
        skip = sep.size();
        break;
      }
    }
    if (cut == std::string_view::npos) {
      cut = end;  // between two characters: not inside one's UTF-8 bytes
      while (cut > start + 1 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
    }
    add(text.substr(start, cut - start));
    start = cut + skip;
  }
  add(text.substr(start));
  return pieces;
}

std::vector<std::string> list_text_files(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    DPE_THROW("read_text_files: cannot open " << path << ": " << std::strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return {path};
  DPE_CHECK(S_ISDIR(st.st_mode), "read_text_files: " << path << " is neither a file nor a folder");
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::vector<std::string> files;
  list_folder(dir, files);
  DPE_CHECK(!files.empty(), "read_text_files: the folder " << path
                                                           << " holds no files (names starting "
                                                              "with '.' are skipped)");
  return files;
}

TextFiles read_text_files(const std::string& path, uint64_t max_bytes) {
  DPE_CHECK(max_bytes > 0, "read_text_files: the limit must be positive");
  TextFiles out;
  out.files = list_text_files(path);
  std::vector<std::string> texts;
  texts.reserve(out.files.size());
  uint64_t left = max_bytes;
  for (const std::string& file : out.files) {
    std::string bytes = read_file(path, file, max_bytes, &left);
    check_text(file, bytes);
    std::string_view text = bytes;
    if (text.substr(0, 3) == "\xef\xbb\xbf") text.remove_prefix(3);  // the UTF-8 BOM
    texts.push_back(normalize_document(text));
    out.bytes += texts.back().size();
  }
  DPE_CHECK(out.bytes > 0,
            "read_text_files: " << path
                                << (out.files.size() == 1 && out.files[0] == path
                                        ? " holds no text"
                                        : ": its " + std::to_string(out.files.size()) +
                                              " file(s) hold no text"));
  out.target_bytes = document_target_bytes(out.bytes);
  for (const std::string& text : texts) {
    std::vector<std::string> pieces = split_text(text, out.target_bytes);
    out.documents.insert(out.documents.end(), std::make_move_iterator(pieces.begin()),
                         std::make_move_iterator(pieces.end()));
  }
  out.bytes = corpus_bytes(out.documents);  // without the separators dropped at the cuts
  return out;
}

}  // namespace dpe
