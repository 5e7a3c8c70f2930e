#include "engine/data/text_corpus.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <set>

#include "engine/core/error.h"
#include "tests/engine/data/text_test_util.h"

namespace dpe {
namespace {

using testing_text::error_of;
using testing_text::scratch_dir;
using testing_text::write_file;

TEST(NormalizeDocument, StripsLayoutButKeepsLinesAndOneBlankLine) {
  EXPECT_EQ(normalize_document("\t  Hello,\tworld!   \n\n\n\n   -- Someone  \n\n"),
            "Hello, world!\n\n-- Someone");
  // Backspace overstrikes (underlining in old fortunes) keep the character struck last.
  EXPECT_EQ(normalize_document("_\bH_\bi there"), "Hi there");
  EXPECT_EQ(normalize_document("bell\a and \x7f delete"), "bell and delete");
  EXPECT_EQ(normalize_document("\n \n"), "");
  EXPECT_EQ(normalize_document("caf\xC3\xA9 \xE2\x80\x9Cquoted\xE2\x80\x9D"),
            "caf\xC3\xA9 \xE2\x80\x9Cquoted\xE2\x80\x9D");  // UTF-8 passes through
}

TEST(ReadFortuneFile, OneDocumentPerFortune) {
  const std::string dir = scratch_dir("fortunes");
  write_file(dir + "/jokes", "First fortune,\n\ttwo lines.\n%\n%\nSecond.\n   -- Author\n%\n");
  const std::vector<std::string> docs = read_fortune_file(dir + "/jokes");
  ASSERT_EQ(docs.size(), 2u);  // the empty fortune between two "%" is dropped
  EXPECT_EQ(docs[0], "First fortune,\ntwo lines.");
  EXPECT_EQ(docs[1], "Second.\n-- Author");
}

TEST(ReadFortuneDir, ReadsFortuneFilesInNameOrderAndSkipsIndexesAndLinks) {
  const std::string dir = scratch_dir("fortunes");
  write_file(dir + "/b", "Bee.\n%\n");
  write_file(dir + "/a", "Ay.\n%\nAy again.\n");
  write_file(dir + "/a.dat", "binary index");
  ASSERT_EQ(::symlink("a", (dir + "/a.u8").c_str()), 0);
  ASSERT_EQ(::symlink("b", (dir + "/c").c_str()), 0);  // a link without a dot: skipped too
  EXPECT_EQ(read_fortune_dir(dir), (std::vector<std::string>{"Ay.", "Ay again.", "Bee."}));
}

TEST(ReadFortuneDir, MissingDirectoryNamesItAndThePackage) {
  const std::string msg = error_of([] { read_fortune_dir("/nonexistent/fortunes"); });
  EXPECT_NE(msg.find("/nonexistent/fortunes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fortunes"), std::string::npos) << msg;
}

// The Jargon File's layout in miniature: front matter, a chapter, a table of contents, entries.
constexpr const char* kJargon =
    "                                The Jargon File\n\n   Table of Contents\n\n   Glossary\n\n"
    "Chapter 1. Hacker Slang\n\n   This document is a collection of slang terms used by\n"
    "   various subcultures of computer hackers.\n\n   Second paragraph.\n\n"
    "Glossary\n\n   0\n\n   /dev/null\n\n   cruft\n\n"
    "   :cruft: /kruhft/\n\n   n. An unpleasant substance. The dust that\n"
    "   gathers under your bed.\n\n   1. Excess; superfluous junk.\n\n"
    "   :zorkmid: /zork'mid/, n.\n\n   The canonical unit of currency.\n\n"
    "Appendix A. Hacker Folklore\n\n   Table of Contents\n\n   The Meaning of Hack\n\n"
    "   This appendix contains legends.\n";

TEST(ReadJargonFile, OneDocumentPerChapterEntryAndAppendixWithoutTablesOfContents) {
  const std::string dir = scratch_dir("jargon");
  const std::string path = dir + "/jargon.txt.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string text = kJargon;
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  const std::vector<std::string> docs = read_jargon_file(path);
  ASSERT_EQ(docs.size(), 4u);
  EXPECT_EQ(docs[0],
            "Chapter 1. Hacker Slang\nThis document is a collection of slang terms used by "
            "various subcultures of computer hackers.\nSecond paragraph.");
  EXPECT_EQ(docs[1],
            ":cruft: /kruhft/\nn. An unpleasant substance. The dust that gathers under your "
            "bed.\n1. Excess; superfluous junk.");
  EXPECT_EQ(docs[2], ":zorkmid: /zork'mid/, n.\nThe canonical unit of currency.");
  EXPECT_EQ(docs[3], "Appendix A. Hacker Folklore\nThis appendix contains legends.");
  // Plain (not gzipped) text reads the same.
  write_file(dir + "/jargon.txt", text);
  EXPECT_EQ(read_jargon_file(dir + "/jargon.txt"), docs);
}

TEST(ReadJargonFile, ErrorsNameTheFile) {
  const std::string dir = scratch_dir("jargon");
  std::string msg = error_of([&] { read_jargon_file(dir + "/missing.txt.gz"); });
  EXPECT_NE(msg.find(dir + "/missing.txt.gz"), std::string::npos) << msg;

  write_file(dir + "/other.txt", "Just some text without chapters.\n");
  msg = error_of([&] { read_jargon_file(dir + "/other.txt"); });
  EXPECT_NE(msg.find(dir + "/other.txt"), std::string::npos) << msg;

  // A gzip header followed by garbage: corrupt, not silently short.
  write_file(dir + "/corrupt.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) +
                                      std::string(64, '\xff'));
  msg = error_of([&] { read_jargon_file(dir + "/corrupt.gz"); });
  EXPECT_NE(msg.find(dir + "/corrupt.gz"), std::string::npos) << msg;
}

// Writes `bytes` to `path` gzip-compressed, in pieces of `repeat` copies of `piece` when given.
void write_gzip(const std::string& path, const std::string& piece, size_t repeat = 1) {
  gzFile f = gzopen(path.c_str(), "wb9");
  ASSERT_NE(f, nullptr);
  for (size_t i = 0; i < repeat; ++i) {
    ASSERT_EQ(gzwrite(f, piece.data(), static_cast<unsigned>(piece.size())),
              static_cast<int>(piece.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// A small gzip that inflates past 64 MiB (newlines compress about 1000 to 1) stops at the limit,
// checked while inflating, instead of inflating it all (a 1 MB gzip of newlines inflated to 1 GB
// and its lines took the rest of the machine's memory).
TEST(ReadJargonFile, AGzipThatInflatesPastTheLimitIsRefusedWhileInflating) {
  const std::string dir = scratch_dir("jargon");
  const std::string path = dir + "/newlines.txt.gz";
  write_gzip(path, std::string(1 << 20, '\n'), 65);  // 65 MiB of newlines, about 65 KB
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_LT(st.st_size, 1 << 20);
  for (auto read : {+[](const std::string& p) { read_jargon_file(p); },
                    +[](const std::string& p) { read_fortune_file(p); }}) {
    const std::string msg = error_of([&] { read(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than 67108864 bytes (64 MiB)"), std::string::npos) << msg;
  }
}

// A document (a fortune, a Jargon File entry) over 1 MiB is refused naming the file and the line
// where it starts: the tokenizer encodes a document whole, in about 50 bytes of memory per byte.
TEST(ReadFortuneFile, ADocumentOverTheLimitIsRefusedNamingItsLine) {
  const std::string dir = scratch_dir("fortunes");
  std::string words;
  while (words.size() <= (1u << 20)) words += "word after word\n";
  write_file(dir + "/long", "A short one.\n%\n" + words + "%\nAnother.\n");
  std::string msg = error_of([&] { read_fortune_file(dir + "/long"); });
  EXPECT_NE(msg.find(dir + "/long"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 bytes (1 MiB)"), std::string::npos) << msg;

  write_file(dir + "/jargon.txt", "Chapter 1. Long\n\n" + words + "\n   :next: entry\n");
  msg = error_of([&] { read_jargon_file(dir + "/jargon.txt"); });
  EXPECT_NE(msg.find(dir + "/jargon.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 bytes (1 MiB)"), std::string::npos) << msg;
}

TEST(LoadLanguageModelCorpus, MissingJargonFileNamesThePackage) {
  const std::string dir = scratch_dir("corpus");
  write_file(dir + "/jokes", "A joke.\n%\n");
  const std::string msg =
      error_of([&] { load_language_model_corpus(dir, dir + "/no-jargon.txt.gz"); });
  EXPECT_NE(msg.find(dir + "/no-jargon.txt.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("jargon-text"), std::string::npos) << msg;
}

TEST(SplitDocuments, EveryTwentiethDocumentIsValidationDeterministicallyAndDisjointly) {
  std::vector<std::string> docs;
  for (int i = 0; i < 100; ++i) docs.push_back("document " + std::to_string(i));
  const TextSplit a = split_documents(docs);
  const TextSplit b = split_documents(docs);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.validation, b.validation);
  ASSERT_EQ(a.validation.size(), 5u);
  EXPECT_EQ(a.train.size(), 95u);
  EXPECT_EQ(a.validation[0], "document 19");
  EXPECT_EQ(a.validation[4], "document 99");
  std::set<std::string> train(a.train.begin(), a.train.end());
  for (const std::string& v : a.validation) EXPECT_EQ(train.count(v), 0u) << v;
  EXPECT_NE(error_of([&] { split_documents(docs, 1); }).find("validation_every"),
            std::string::npos);
}

TEST(CorpusChecksum, ChangesWithTextAndDocumentBoundaries) {
  EXPECT_EQ(corpus_checksum({"ab", "c"}), corpus_checksum({"ab", "c"}));
  EXPECT_NE(corpus_checksum({"ab", "c"}), corpus_checksum({"a", "bc"}));
  EXPECT_NE(corpus_checksum({"ab"}), corpus_checksum({"ac"}));
  EXPECT_EQ(corpus_bytes({"ab", "c"}), 3u);
}

// The real corpus, from the Debian packages tools/bazelw installs (skipped where they are not).
TEST(LoadLanguageModelCorpus, DebianCorpusHasSeveralMegabytesOfDocuments) {
  if (::access(kFortunesDir, R_OK) != 0 || ::access(kJargonFile, R_OK) != 0) {
    GTEST_SKIP() << "fortunes or jargon-text is not installed";
  }
  const std::vector<std::string> docs = load_language_model_corpus();
  EXPECT_GT(docs.size(), 15000u);
  EXPECT_GT(corpus_bytes(docs), 3'500'000u);
  for (const std::string& doc : docs) {
    ASSERT_FALSE(doc.empty());
    ASSERT_EQ(doc.find('\t'), std::string::npos);
    ASSERT_EQ(doc.find('\b'), std::string::npos);
  }
}

}  // namespace
}  // namespace dpe
