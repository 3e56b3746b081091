//===- FileAccess.h - Reading files on a program's behalf, confined -------===//
//
// A span program names files (`file("...")`) and corpus folders
// (`retrieve(corpus = ...)`), and once `spanc serve` accepts programs their
// author is not the machine's owner. Everything spanc reads because a
// program asked for it goes through here: the path's real location
// (symbolic links and `..` resolved) must lie inside one of the folders the
// user allowed (the program's own folder and `--allow-read DIR`), and only
// a regular file of at most `--max-file-size` bytes is read (never a FIFO,
// which would block, a device such as /dev/zero, which never ends, or a
// folder).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SUPPORT_FILEACCESS_H
#define SPANC_SUPPORT_FILEACCESS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spanc::support {

/// The default of `--max-file-size`: far more than a prompt the models
/// take (a context of 8192 tokens is some 32 KB of text), small enough that
/// a careless path costs little.
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t(8) << 20;

/// Where a program may read and how much.
struct ReadPolicy {
  /// Folders whose files (at any depth) may be read, as given; each is
  /// resolved to its real path when a path is checked. None: nothing may be
  /// read.
  std::vector<std::string> roots;
  /// The most bytes one file may hold.
  uint64_t maxFileBytes = kDefaultMaxFileBytes;

  /// A policy for the program at `programPath` ("-" or "": standard input,
  /// whose folder is the working folder; a folder: a bulk of programs in
  /// it): its folder, both as named and where the program file really lies
  /// (so a program reached through a link, as in Bazel's runfiles, may read
  /// beside its real self), plus `extraRoots`.
  static ReadPolicy forProgram(llvm::StringRef programPath,
                               llvm::ArrayRef<std::string> extraRoots = {},
                               uint64_t maxFileBytes = kDefaultMaxFileBytes);
};

/// The real path of `path` (symbolic links and `..` resolved), checked to
/// lie inside one of the policy's roots. The error says why not: the path
/// does not exist, or it lies outside every root (naming them and
/// `--allow-read`). Errors here and in readFile read "'PATH': REASON".
llvm::Expected<std::string> confinePath(llvm::StringRef path,
                                        const ReadPolicy &policy);

/// Whether `realPath` (already resolved) lies inside one of the policy's
/// roots.
bool isInsideRoots(llvm::StringRef realPath, const ReadPolicy &policy);

/// Reads the file at `path` under `policy`: confined as confinePath says,
/// opened without following a final link and without blocking, and read
/// only if it is a regular file of at most `maxFileBytes` bytes (checked
/// again while reading, for a file that grows). The opened file's own
/// path is checked against the roots too, so a folder swapped for a link
/// between the check and the open is caught.
llvm::Expected<std::string> readFile(llvm::StringRef path,
                                     const ReadPolicy &policy);

/// `path` in single quotes for a message, its control bytes escaped (\0,
/// \n, \t, \xNN): a NUL would cut the message where it is printed.
std::string quotePath(llvm::StringRef path);

/// "a FIFO", "a folder", "a character device", ... for error messages.
const char *describeFileType(unsigned mode);

/// A size in bytes as a user writes it: "4096", "512KiB", "8MiB", "1GiB"
/// (also "KB", "MB", "GB" for powers of 1000, and "K", "M", "G" for 1024).
llvm::Expected<uint64_t> parseByteSize(llvm::StringRef text);

} // namespace spanc::support

#endif // SPANC_SUPPORT_FILEACCESS_H
