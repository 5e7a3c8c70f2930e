// A user's text (engine/data/text_files.h): which files a folder gives, the UTF-8 check and its
// message, and how a long text is cut into documents.
#include "engine/data/text_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/engine/data/text_test_util.h"

namespace dpe {
namespace {

using testing_text::error_of;
using testing_text::scratch_dir;
using testing_text::write_file;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// `n` paragraphs of a few sentences each, separated by blank lines.
std::string paragraphs(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += "\n\n";
    text += "Paragraph " + std::to_string(i) + " begins here.\nIt goes on for a while, as " +
            "paragraphs in novels do, and then it ends.";
  }
  return text;
}

TEST(InvalidUtf8Offset, AcceptsUtf8AndFindsTheFirstBadByte) {
  EXPECT_EQ(invalid_utf8_offset("plain ASCII\n"), 12u);
  EXPECT_EQ(invalid_utf8_offset("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), 14u);  // é € 😀
  EXPECT_EQ(invalid_utf8_offset(std::string("ab\0cd", 5)), 2u);                      // NUL
  EXPECT_EQ(invalid_utf8_offset("caf\xe9 au lait"), 3u);                             // Latin-1 é
  EXPECT_EQ(invalid_utf8_offset("x\xc0\xafy"), 1u);                                  // overlong '/'
  EXPECT_EQ(invalid_utf8_offset("x\xed\xa0\x80y"), 1u);                              // a surrogate
  EXPECT_EQ(invalid_utf8_offset("x\xf4\x90\x80\x80"), 1u);                           // > U+10FFFF
  EXPECT_EQ(invalid_utf8_offset("ok\xe2\x82"), 2u);                                  // truncated
  EXPECT_EQ(invalid_utf8_offset("\x80"), 0u);                                        // continuation
}

TEST(SplitText, CutsAtParagraphsThenLinesThenSpaces) {
  // Paragraphs: every piece ends where a paragraph does.
  const std::string text = paragraphs(40);
  const std::vector<std::string> pieces = split_text(text, 400);
  ASSERT_GE(pieces.size(), 8u);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_LE(p.size(), 400u);
    EXPECT_GE(p.size(), 100u) << p;
    EXPECT_EQ(p.rfind("Paragraph ", 0), 0u) << p;
    EXPECT_EQ(p.back(), '.') << p;
    joined += (joined.empty() ? "" : "\n\n") + p;
  }
  EXPECT_EQ(joined, text);  // nothing lost but the blank lines cut at
  // One line per sentence and no blank lines: cut at line ends.
  std::string lines;
  for (int i = 0; i < 50; ++i) lines += "Sentence number " + std::to_string(i) + " is here.\n";
  for (const std::string& p : split_text(lines, 100)) {
    EXPECT_LE(p.size(), 100u);
    EXPECT_EQ(p.rfind("Sentence", 0), 0u) << p;
    EXPECT_NE(p.back(), '\n');
  }
  // One long line: cut at spaces; no space at all: between characters, never inside one.
  for (const std::string& p : split_text(std::string(30, 'w') + " " + std::string(30, 'w'), 40)) {
    EXPECT_EQ(p, std::string(30, 'w'));
  }
  std::string euros;
  for (int i = 0; i < 20; ++i) euros += "\xe2\x82\xac";           // 3 bytes each
  const std::vector<std::string> thirds = split_text(euros, 10);  // 60 bytes: 6 x 9, then 6
  ASSERT_EQ(thirds.size(), 7u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(thirds[i], "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac");
  EXPECT_EQ(thirds[6], "\xe2\x82\xac\xe2\x82\xac");
  EXPECT_EQ(split_text("short", 100), std::vector<std::string>{"short"});
  EXPECT_TRUE(split_text("", 100).empty());
}

// One line of 32 MiB (words, no newline): cut at spaces into pieces of at most 4 KiB that give the
// text back. Each cut looks for a separator only in the second half of its piece; it once searched
// back to the start of the text for the missing paragraph and line breaks, minutes for this text
// (the test's timeout stops that) and hours for 100 MB.
TEST(SplitText, OneLongLineIsCutAtSpacesLookingOnlyInsideThePiece) {
  std::string text;
  text.reserve((32u << 20) + 16);
  for (uint64_t i = 0; text.size() < (32u << 20); ++i) {
    if (i > 0) text += ' ';
    text += i % 7 == 0 ? "seven" : "word";
  }
  const std::vector<std::string> pieces = split_text(text, 4096);
  ASSERT_GT(pieces.size(), (32u << 20) / 4096);
  std::string joined;
  joined.reserve(text.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string& piece = pieces[i];
    ASSERT_LE(piece.size(), 4096u);
    if (i + 1 < pieces.size()) {
      ASSERT_GE(piece.size(), 2048u - 8) << "cut in the first half";
    }
    if (!joined.empty()) joined += ' ';
    joined += piece;
  }
  EXPECT_TRUE(joined == text);
}

TEST(DocumentTargetBytes, FourKibibytesOrAHundredthOfAShortText) {
  EXPECT_EQ(document_target_bytes(10'000'000), 4096u);
  EXPECT_EQ(document_target_bytes(100'000), 1000u);
  EXPECT_EQ(document_target_bytes(1000), 256u);
}

TEST(ReadTextFiles, AFileIsCutIntoDocuments) {
  const std::string dir = scratch_dir("text");
  // A byte-order mark, CRLF line ends and tabs: normalized away.
  std::string text = "\xef\xbb\xbf";
  for (int i = 0; i < 300; ++i) {
    text += "Line\t" + std::to_string(i) + " of the book.\r\n";
    if (i % 5 == 4) text += "\r\n";
  }
  write_file(dir + "/book.txt", text);
  const TextFiles t = read_text_files(dir + "/book.txt");
  EXPECT_EQ(t.files, std::vector<std::string>{dir + "/book.txt"});
  EXPECT_EQ(t.target_bytes, 256u);  // under 25.6 KB of text
  ASSERT_GE(t.documents.size(), 20u);
  EXPECT_EQ(t.documents[0].rfind("Line 0 of the book.\nLine 1 of the book.", 0), 0u)
      << t.documents[0];
  uint64_t bytes = 0;
  for (const std::string& d : t.documents) {
    EXPECT_FALSE(has(d, "\r") || has(d, "\t") || has(d, "\xef\xbb\xbf")) << d;
    bytes += d.size();
  }
  EXPECT_EQ(t.bytes, bytes);
}

TEST(ReadTextFiles, AFolderIsReadRecursivelyInPathOrderSkippingHiddenNames) {
  const std::string dir = scratch_dir("text");
  ::mkdir((dir + "/b").c_str(), 0755);
  ::mkdir((dir + "/.git").c_str(), 0755);
  write_file(dir + "/b/two.txt", "Second file.");
  write_file(dir + "/a.md", "First file.");
  write_file(dir + "/c", "Third file, no extension.");
  write_file(dir + "/.hidden.txt", "\xff never read");
  write_file(dir + "/.git/HEAD", "\xff never read");
  write_file(dir + "/empty.txt", "  \n\n");
  (void)!::symlink(dir.c_str(), (dir + "/loop").c_str());  // a link to a folder: not followed
  const TextFiles t = read_text_files(dir + "/");
  EXPECT_EQ(t.files, (std::vector<std::string>{dir + "/a.md", dir + "/b/two.txt", dir + "/c",
                                               dir + "/empty.txt"}));
  EXPECT_EQ(t.documents,
            (std::vector<std::string>{"First file.", "Second file.", "Third file, no extension."}));
}

// The files are read in pieces, counted as they come: past the limit the read stops, naming the
// file where it was crossed and the limit (64 MiB by default), before a byte of it is checked.
// A sparse file of 65 MiB of NULs costs no disk; it was read whole and reported as binary.
TEST(ReadTextFiles, ReadingStopsAtTheLimitNamingTheFileAndTheLimit) {
  const std::string dir = scratch_dir("text");
  const std::string big = dir + "/sparse.txt";
  write_file(big, "");
  ASSERT_EQ(::truncate(big.c_str(), (65 << 20)), 0);
  std::string msg = error_of([&] { read_text_files(big); });
  EXPECT_TRUE(has(msg, big + " holds more than 67108864 bytes (64 MiB) of text, the limit")) << msg;
  EXPECT_FALSE(has(msg, "NUL")) << msg;

  // A smaller limit, in a folder: the file that crosses it is named; up to it all is read.
  const std::string folder = dir + "/folder";
  ::mkdir(folder.c_str(), 0755);
  write_file(folder + "/a.txt", std::string(600, 'a'));
  write_file(folder + "/b.txt", std::string(600, 'b'));
  EXPECT_EQ(read_text_files(folder, 1200).bytes, 1200u);
  try {
    read_text_files(folder, 1199);
    ADD_FAILURE() << "no TextLimitError";
  } catch (const TextLimitError& e) {
    msg = e.what();
    EXPECT_TRUE(has(msg, folder + " holds more than 1199 bytes of text, the limit (" + folder +
                             "/b.txt goes past it)"))
        << msg;
  }
}

TEST(ReadTextFiles, ErrorsNameTheFileAndWhatIsWrong) {
  const std::string dir = scratch_dir("text");
  std::string msg = error_of([&] { read_text_files(dir + "/missing.txt"); });
  EXPECT_TRUE(has(msg, dir + "/missing.txt") && has(msg, "No such file")) << msg;

  write_file(dir + "/latin1.txt", "First line.\nUn caf\xe9 noir.\n");
  msg = error_of([&] { read_text_files(dir + "/latin1.txt"); });
  EXPECT_TRUE(has(msg, dir + "/latin1.txt is not UTF-8 text: byte 0xe9 at offset 18 (line 2)"))
      << msg;

  write_file(dir + "/binary.bin", std::string("ELF\0\1\2", 6));
  msg = error_of([&] { read_text_files(dir + "/binary.bin"); });
  EXPECT_TRUE(has(msg, dir + "/binary.bin is binary, not text: a NUL byte at offset 3 (line 1)"))
      << msg;

  write_file(dir + "/book.txt.gz", "\x1f\x8b\x08\x00");
  msg = error_of([&] { read_text_files(dir + "/book.txt.gz"); });
  EXPECT_TRUE(has(msg, dir + "/book.txt.gz is gzip-compressed")) << msg;

  write_file(dir + "/utf16.txt", std::string("\xff\xfeh\0i\0", 6));
  msg = error_of([&] { read_text_files(dir + "/utf16.txt"); });
  EXPECT_TRUE(has(msg, dir + "/utf16.txt is UTF-16 text")) << msg;

  write_file(dir + "/blank.txt", "\n \n\t\n");
  msg = error_of([&] { read_text_files(dir + "/blank.txt"); });
  EXPECT_TRUE(has(msg, dir + "/blank.txt holds no text")) << msg;

  // In a folder, the one bad file is named.
  const std::string folder = dir + "/folder";
  ::mkdir(folder.c_str(), 0755);
  write_file(folder + "/good.txt", "Fine text.");
  write_file(folder + "/picture.png", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  msg = error_of([&] { read_text_files(folder); });
  EXPECT_TRUE(has(msg, folder + "/picture.png is not UTF-8 text: byte 0x89 at offset 0")) << msg;

  const std::string empty = dir + "/empty_folder";
  ::mkdir(empty.c_str(), 0755);
  write_file(empty + "/.only_hidden", "text");
  msg = error_of([&] { read_text_files(empty); });
  EXPECT_TRUE(has(msg, "the folder " + empty + " holds no files")) << msg;

  if (::geteuid() != 0) {  // root reads anything
    write_file(dir + "/secret.txt", "text");
    ::chmod((dir + "/secret.txt").c_str(), 0);
    msg = error_of([&] { read_text_files(dir + "/secret.txt"); });
    EXPECT_TRUE(has(msg, "cannot read " + dir + "/secret.txt: Permission denied")) << msg;
  }
}

}  // namespace
}  // namespace dpe
