// The language-model corpus: English text that Debian packages ship, read into documents, and
// its deterministic train/validation split.
//
// Which text, and why (docs/corpus.md): every fortune of `fortunes`
// (/usr/share/games/fortunes: quotes, jokes, poems; BSD licence) and the Jargon File 4.4.7 of
// `jargon-text` (public domain prose: chapters, lexicon entries, appendices). They are the
// largest English prose in Debian main shipped as plain text (the KJV of bible-kjv-text is
// compressed in its own format; no Gutenberg books are packaged), about 4 MB together: enough for
// a small GPT to learn far more than unigram statistics in a few minutes, with no network.
//
// Threading contract: free functions without shared state; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dpe {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr const char* kJargonFile = "/usr/share/doc/jargon-text/jargon.txt.gz";

// What the corpus readers take, far above what Debian ships (the Jargon File inflates to 1.7 MB,
// its longest entry is a few KB, the longest fortune 2.4 KB), so that a file that is not the
// corpus's stops with an error naming it instead of taking the machine's memory. A file's bytes
// are counted as they are inflated, never inflated whole first; a document is checked as it
// grows (the tokenizer encodes a document whole, in about 50 bytes of memory per byte).
inline constexpr uint64_t kMaxCorpusFileBytes = uint64_t{64} << 20;     // a file, inflated
inline constexpr uint64_t kMaxCorpusDocumentBytes = uint64_t{1} << 20;  // a document

// Strips what is layout rather than text: backspace overstrikes ("_\bX" becomes "X"), other
// control characters, tabs (become spaces), runs of spaces, spaces at line ends and starts,
// runs of blank lines (one is kept), blank lines at both ends.
std::string normalize_document(std::string_view text);

// One document per fortune (fortunes are separated by lines holding only "%"), normalized;
// empty fortunes are dropped. Throws dpe::Error naming the file when it cannot be read, inflates
// past kMaxCorpusFileBytes, or holds a fortune over kMaxCorpusDocumentBytes (naming its line).
std::vector<std::string> read_fortune_file(const std::string& path);

// Every fortune file of `dir` in name order: regular files whose name has no '.' (the .dat
// indexes and .u8 links are skipped). Throws naming `dir` when it is missing or holds none.
std::vector<std::string> read_fortune_dir(const std::string& dir);

// The Jargon File's text (gzip-compressed or plain): one document per chapter, lexicon entry and
// appendix, paragraphs reflowed to one line each. Tables of contents and headings (paragraphs of
// one short line without punctuation) are dropped. Throws naming the file when it cannot be read,
// holds no chapter, or is over the limits above (as read_fortune_file).
std::vector<std::string> read_jargon_file(const std::string& path);

// The corpus: the fortunes, then the Jargon File. Errors name the file and the Debian package.
std::vector<std::string> load_language_model_corpus(const std::string& fortunes_dir = kFortunesDir,
                                                    const std::string& jargon_file = kJargonFile);

// Split by document, so no window straddles the two: document i is validation when
// i % validation_every == validation_every - 1 (every 20th: 5%, spread over every source file
// rather than the tail, which would be all Jargon File), training otherwise.
struct TextSplit {
  std::vector<std::string> train;
  std::vector<std::string> validation;
};
TextSplit split_documents(const std::vector<std::string>& documents, int64_t validation_every = 20);

// FNV-1a (64 bits) of the documents and their lengths: a cache key that changes with the text.
uint64_t corpus_checksum(const std::vector<std::string>& documents);

// Total bytes of the documents.
uint64_t corpus_bytes(const std::vector<std::string>& documents);

}  // namespace dpe
