// A user's own text for the language models (//tools:train --text): a UTF-8 text file, or a
// folder of them, read into documents the way the built-in corpus (text_corpus.h) is.
//
// Which files: `path` itself when it is a file (whatever its name); when it is a folder, every
// regular file under it, recursively, in byte order of their paths, skipping names that start
// with '.' (hidden files and folders: .git, editor backups) and not following symbolic links to
// folders (links to files are read). Each file must be UTF-8 text (a leading byte-order mark is
// dropped); a NUL byte or an invalid UTF-8 sequence is an error naming the file and the byte
// offset, so a stray binary in a folder is found rather than trained on.
//
// Documents: each file is normalized (normalize_document: control characters, runs of spaces and
// of blank lines go) and cut into pieces of at most document_target_bytes(total) bytes, at a
// paragraph break (a blank line) where the second half of the piece has one, else at a line end,
// else at a space, else between two characters. A file never shares a document with another, so
// a folder of short texts gives a document each; a novel in one file gives pieces of a few pages,
// of which split_documents's every 20th is validation text spread through the whole book.
//
// How much: the files are read in pieces and counted as they come; past `max_bytes` in all
// (kMaxTextBytes, 64 MiB, by default; train's --max-text-bytes) the read stops with a
// TextLimitError naming the file that crossed it and the limit, before the rest is read.
//
// Threading contract: free functions without shared state; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace dpe {

// The most bytes of text read_text_files reads by default: a run on it peaks at about 3 GB (the
// tokenizer's training and the token streams take about 45 bytes per byte of text; docs/own_data.md).
inline constexpr uint64_t kMaxTextBytes = uint64_t{64} << 20;

// The text is over the limit; the message names the file that crossed it and the limit, and the
// caller adds how to raise it.
class TextLimitError : public Error {
 public:
  using Error::Error;
};

struct TextFiles {
  std::vector<std::string> documents;  // in file order, each file's pieces in text order
  std::vector<std::string> files;      // the files read, in order
  uint64_t bytes = 0;                  // of the documents (normalized text)
  uint64_t target_bytes = 0;           // document_target_bytes(bytes)
};

// Reads `path` as above, at most `max_bytes` (> 0) of its files' bytes. Throws dpe::Error naming
// the path or file when it is missing or unreadable, when a file is not UTF-8 text (with the byte
// offset and line), and when nothing holds any text; TextLimitError past `max_bytes`.
TextFiles read_text_files(const std::string& path, uint64_t max_bytes = kMaxTextBytes);

// The files read_text_files reads for `path`, in order. Throws naming `path` when it is missing,
// is neither a file nor a folder, or is a folder holding no file; and naming any folder under it
// that cannot be listed.
std::vector<std::string> list_text_files(const std::string& path);

// The offset of the first byte of `bytes` that is a NUL or starts an invalid (overlong,
// surrogate, out-of-range or truncated) UTF-8 sequence; bytes.size() when there is none.
size_t invalid_utf8_offset(std::string_view bytes);

// The longest document: 4 KiB (a few pages), or total / 100 for texts under 400 KiB so that
// even a short text gives enough documents for a validation split, but at least 256 bytes.
uint64_t document_target_bytes(uint64_t total_bytes);

// Cuts normalized `text` into pieces of at most `target` bytes (> 0) as described above; pieces
// are never empty and hold no leading or trailing newline.
std::vector<std::string> split_text(std::string_view text, uint64_t target);

}  // namespace dpe
