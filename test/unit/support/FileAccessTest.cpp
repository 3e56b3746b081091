//===- FileAccessTest.cpp - Confined reads: roots, links, file kinds, size ===//

#include "support/FileAccess.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/stat.h>
#include <unistd.h>

using namespace spanc::support;
using ::testing::HasSubstr;

namespace {

/// A temporary folder, removed with everything in it.
class TempFolder {
public:
  TempFolder() {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("spanc-access", directory);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempFolder() { llvm::sys::fs::remove_directories(directory); }

  std::string path(llvm::StringRef relative = "") const {
    llvm::SmallString<128> full(directory);
    if (!relative.empty())
      llvm::sys::path::append(full, relative);
    return std::string(full);
  }
  std::string write(llvm::StringRef relative, llvm::StringRef content) {
    std::string file = path(relative);
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(file));
    std::error_code ec;
    llvm::raw_fd_ostream out(file, ec);
    EXPECT_FALSE(ec) << ec.message();
    out << content;
    return file;
  }

private:
  llvm::SmallString<128> directory;
};

ReadPolicy policyFor(std::vector<std::string> roots, uint64_t maxBytes = 1000) {
  ReadPolicy policy;
  policy.roots = std::move(roots);
  policy.maxFileBytes = maxBytes;
  return policy;
}

std::string readError(llvm::StringRef path, const ReadPolicy &policy) {
  auto contents = readFile(path, policy);
  if (contents) {
    ADD_FAILURE() << "read '" << path.str() << "': " << *contents;
    return "";
  }
  return llvm::toString(contents.takeError());
}

} // namespace

TEST(FileAccess, ReadsARegularFileInsideARoot) {
  TempFolder folder;
  std::string file = folder.write("notes/a.txt", "hello");
  auto contents = readFile(file, policyFor({folder.path()}));
  ASSERT_TRUE(static_cast<bool>(contents))
      << llvm::toString(contents.takeError());
  EXPECT_EQ(*contents, "hello");
}

TEST(FileAccess, AbsolutePathOutsideEveryRootIsRefused) {
  TempFolder folder;
  EXPECT_THAT(readError("/etc/passwd", policyFor({folder.path()})),
              HasSubstr("'/etc/passwd': outside the folders this program may "
                        "read ('"));
  EXPECT_THAT(readError("/etc/passwd", policyFor({folder.path()})),
              HasSubstr("--allow-read DIR"));
}

TEST(FileAccess, NoRootsMeansNothingIsReadable) {
  TempFolder folder;
  std::string file = folder.write("a.txt", "x");
  EXPECT_THAT(readError(file, policyFor({})),
              HasSubstr("outside the folders this program may read (none)"));
}

TEST(FileAccess, DotDotOutOfTheRootIsRefused) {
  TempFolder folder;
  folder.write("inside/a.txt", "in");
  std::string secret = folder.write("secret.txt", "out");
  std::string traversal = folder.path("inside/../secret.txt");
  EXPECT_THAT(readError(traversal, policyFor({folder.path("inside")})),
              HasSubstr("really '"));
  // `..` that stays inside is fine.
  auto inside = readFile(folder.path("inside/../inside/a.txt"),
                         policyFor({folder.path("inside")}));
  ASSERT_TRUE(static_cast<bool>(inside)) << llvm::toString(inside.takeError());
  EXPECT_EQ(*inside, "in");
  (void)secret;
}

TEST(FileAccess, LinkLeadingOutOfTheRootIsRefusedAndOneInsideIsFollowed) {
  TempFolder folder;
  folder.write("root/kept.txt", "kept");
  folder.write("outside.txt", "leaked");
  ASSERT_FALSE(llvm::sys::fs::create_link(folder.path("outside.txt"),
                                          folder.path("root/leak.txt")));
  ASSERT_FALSE(llvm::sys::fs::create_link(folder.path("root/kept.txt"),
                                          folder.path("root/alias.txt")));
  ReadPolicy policy = policyFor({folder.path("root")});
  EXPECT_THAT(readError(folder.path("root/leak.txt"), policy),
              HasSubstr("outside the folders"));
  auto alias = readFile(folder.path("root/alias.txt"), policy);
  ASSERT_TRUE(static_cast<bool>(alias)) << llvm::toString(alias.takeError());
  EXPECT_EQ(*alias, "kept");
}

TEST(FileAccess, RootReachedThroughALinkIsItsRealFolder) {
  TempFolder folder;
  folder.write("real/a.txt", "a");
  ASSERT_FALSE(
      llvm::sys::fs::create_link(folder.path("real"), folder.path("alias")));
  auto contents =
      readFile(folder.path("real/a.txt"), policyFor({folder.path("alias")}));
  ASSERT_TRUE(static_cast<bool>(contents))
      << llvm::toString(contents.takeError());
}

TEST(FileAccess, FifoIsRefusedWithoutBlocking) {
  TempFolder folder;
  std::string fifo = folder.path("a.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(readError(fifo, policyFor({folder.path()})),
              HasSubstr("a FIFO, not a regular file"));
}

TEST(FileAccess, DeviceIsRefusedEvenInsideARoot) {
  EXPECT_THAT(readError("/dev/zero", policyFor({"/dev"})),
              HasSubstr("'/dev/zero': a character device, not a regular file"));
}

TEST(FileAccess, FolderIsRefused) {
  TempFolder folder;
  folder.write("sub/a.txt", "a");
  EXPECT_THAT(readError(folder.path("sub"), policyFor({folder.path()})),
              HasSubstr("a folder, not a regular file"));
}

TEST(FileAccess, ProcessFilesAreOutsideOrdinaryRoots) {
  TempFolder folder;
  EXPECT_THAT(readError("/proc/self/environ", policyFor({folder.path()})),
              HasSubstr("outside the folders"));
}

TEST(FileAccess, FileOverTheSizeLimitIsRefused) {
  TempFolder folder;
  std::string file = folder.write("big.txt", std::string(1001, 'x'));
  EXPECT_THAT(readError(file, policyFor({folder.path()}, 1000)),
              HasSubstr("1001 bytes, over the limit of 1000 (raise it with "
                        "--max-file-size)"));
  folder.write("fits.txt", std::string(1000, 'x'));
  EXPECT_TRUE(static_cast<bool>(
      readFile(folder.path("fits.txt"), policyFor({folder.path()}, 1000))));
}

TEST(FileAccess, SizeLimitHoldsForFilesThatUnderstateTheirSize) {
  // /proc files say 0 bytes and hold more.
  EXPECT_THAT(readError("/proc/self/maps", policyFor({"/proc"}, 16)),
              HasSubstr("over the limit of 16"));
}

TEST(FileAccess, MissingFileNamesTheReason) {
  TempFolder folder;
  EXPECT_THAT(readError(folder.path("none.txt"), policyFor({folder.path()})),
              HasSubstr("none.txt': No such file or directory"));
}

TEST(FileAccess, ProgramPolicyCoversItsFolderNamedAndReal) {
  TempFolder folder;
  std::string program = folder.write("real/prog.span", "query q {}");
  folder.write("real/prompt.txt", "beside the real program");
  ASSERT_FALSE(llvm::sys::fs::create_directories(folder.path("links")));
  ASSERT_FALSE(
      llvm::sys::fs::create_link(program, folder.path("links/prog.span")));
  ReadPolicy policy =
      ReadPolicy::forProgram(folder.path("links/prog.span"), {"/extra"}, 42);
  EXPECT_EQ(policy.maxFileBytes, 42u);
  EXPECT_THAT(policy.roots, ::testing::ElementsAre(folder.path("links"),
                                                   ::testing::_, "/extra"));
  auto contents = readFile(folder.path("real/prompt.txt"), policy);
  ASSERT_TRUE(static_cast<bool>(contents))
      << llvm::toString(contents.takeError());
  // Standard input's folder is the working folder.
  EXPECT_THAT(ReadPolicy::forProgram("-").roots, ::testing::ElementsAre("."));
  EXPECT_THAT(ReadPolicy::forProgram("prog.span").roots.front(), ".");
}

TEST(FileAccess, ProgramPolicyOfABulkFolderIsTheFolder) {
  TempFolder folder;
  folder.write("bulk/a.span", "query q {}");
  ReadPolicy policy = ReadPolicy::forProgram(folder.path("bulk"));
  ASSERT_EQ(policy.roots.size(), 2u);
  EXPECT_EQ(policy.roots[0], folder.path("bulk"));
  EXPECT_TRUE(llvm::StringRef(policy.roots[1]).endswith("/bulk"));
}

TEST(FileAccess, ByteSizesTakeBinaryAndDecimalUnits) {
  auto size = [](llvm::StringRef text) -> uint64_t {
    auto parsed = parseByteSize(text);
    if (!parsed) {
      ADD_FAILURE() << llvm::toString(parsed.takeError());
      return 0;
    }
    return *parsed;
  };
  EXPECT_EQ(size("4096"), 4096u);
  EXPECT_EQ(size("8MiB"), 8u << 20);
  EXPECT_EQ(size("8 mib"), 8u << 20);
  EXPECT_EQ(size("512K"), 512u << 10);
  EXPECT_EQ(size("2GiB"), uint64_t(2) << 30);
  EXPECT_EQ(size("1MB"), 1000000u);
  for (const char *bad : {"", "MiB", "-1", "1.5MiB", "3 parsecs",
                          "99999999999999999999", "20000000000GiB"}) {
    auto parsed = parseByteSize(bad);
    EXPECT_FALSE(static_cast<bool>(parsed)) << bad;
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
}
