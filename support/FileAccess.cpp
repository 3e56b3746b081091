//===- FileAccess.cpp - Reading files on a program's behalf, confined -----===//

#include "support/FileAccess.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace spanc::support {

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// realpath(3): the path with every link and `..` resolved, or the errno.
llvm::ErrorOr<std::string> realPathOf(llvm::StringRef path) {
  std::string copy = path.str();
  char resolved[PATH_MAX];
  if (!::realpath(copy.c_str(), resolved))
    return std::error_code(errno, std::generic_category());
  return std::string(resolved);
}

/// The roots that exist, resolved, each once.
std::vector<std::string> realRoots(const ReadPolicy &policy) {
  std::vector<std::string> roots;
  for (const std::string &root : policy.roots)
    if (llvm::ErrorOr<std::string> real = realPathOf(root))
      if (llvm::find(roots, *real) == roots.end())
        roots.push_back(*real);
  return roots;
}

bool isInside(llvm::StringRef realPath, llvm::StringRef root) {
  if (root == "/")
    return realPath.startswith("/");
  return realPath == root ||
         (realPath.startswith(root) && realPath[root.size()] == '/');
}

std::string listRoots(const ReadPolicy &policy) {
  std::vector<std::string> roots = realRoots(policy);
  if (roots.empty())
    return "none";
  std::string list;
  for (const std::string &root : roots)
    list += (list.empty() ? "'" : ", '") + root + "'";
  return list;
}

llvm::Error outsideError(llvm::StringRef path, llvm::StringRef realPath,
                         const ReadPolicy &policy) {
  std::string really =
      realPath == path ? "" : "really " + quotePath(realPath) + ", ";
  return makeError(quotePath(path) + ": " + really +
                   "outside the folders this program may read (" +
                   listRoots(policy) +
                   "); allow a folder with --allow-read DIR");
}

} // namespace

ReadPolicy ReadPolicy::forProgram(llvm::StringRef programPath,
                                  llvm::ArrayRef<std::string> extraRoots,
                                  uint64_t maxFileBytes) {
  ReadPolicy policy;
  policy.maxFileBytes = maxFileBytes;
  bool fromStandardInput = programPath.empty() || programPath == "-";
  bool isFolder =
      !fromStandardInput && llvm::sys::fs::is_directory(programPath);
  llvm::StringRef folder = fromStandardInput ? ""
                           : isFolder
                               ? programPath
                               : llvm::sys::path::parent_path(programPath);
  policy.roots.push_back(folder.empty() ? "." : folder.str());
  if (!fromStandardInput)
    if (llvm::ErrorOr<std::string> real = realPathOf(programPath))
      policy.roots.push_back(
          isFolder ? *real : llvm::sys::path::parent_path(*real).str());
  policy.roots.insert(policy.roots.end(), extraRoots.begin(), extraRoots.end());
  return policy;
}

bool isInsideRoots(llvm::StringRef realPath, const ReadPolicy &policy) {
  for (const std::string &root : realRoots(policy))
    if (isInside(realPath, root))
      return true;
  return false;
}

std::string quotePath(llvm::StringRef path) {
  std::string quoted = "'";
  for (char c : path) {
    unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\0')
      quoted += "\\0";
    else if (c == '\n')
      quoted += "\\n";
    else if (c == '\t')
      quoted += "\\t";
    else if (byte < 0x20 || byte == 0x7F)
      quoted += "\\x" + llvm::utohexstr(byte, /*LowerCase=*/true, 2);
    else
      quoted += c;
  }
  return quoted + "'";
}

llvm::Expected<std::string> confinePath(llvm::StringRef path,
                                        const ReadPolicy &policy) {
  // The system's calls would read the path up to its NUL: another file.
  if (path.contains('\0'))
    return makeError(quotePath(path) + ": a path may not contain a NUL byte");
  llvm::ErrorOr<std::string> real = realPathOf(path);
  if (!real)
    return makeError(quotePath(path) + ": " + real.getError().message());
  if (!isInsideRoots(*real, policy))
    return outsideError(path, *real, policy);
  return *real;
}

const char *describeFileType(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFDIR:
    return "a folder";
  case S_IFIFO:
    return "a FIFO";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFSOCK:
    return "a socket";
  case S_IFLNK:
    return "a symbolic link";
  }
  return "not a regular file";
}

llvm::Expected<uint64_t> parseByteSize(llvm::StringRef text) {
  llvm::StringRef trimmed = text.trim();
  size_t digits = 0;
  while (digits < trimmed.size() && llvm::isDigit(trimmed[digits]))
    ++digits;
  uint64_t number = 0;
  if (digits == 0 || trimmed.take_front(digits).getAsInteger(10, number))
    return makeError("'" + text +
                     "' is not a size (bytes, or a number with "
                     "KiB, MiB or GiB)");
  llvm::StringRef unit = trimmed.drop_front(digits).trim();
  uint64_t scale = 0;
  if (unit.empty() || unit.equals_insensitive("b"))
    scale = 1;
  else if (unit.equals_insensitive("k") || unit.equals_insensitive("kib"))
    scale = uint64_t(1) << 10;
  else if (unit.equals_insensitive("m") || unit.equals_insensitive("mib"))
    scale = uint64_t(1) << 20;
  else if (unit.equals_insensitive("g") || unit.equals_insensitive("gib"))
    scale = uint64_t(1) << 30;
  else if (unit.equals_insensitive("kb"))
    scale = 1000;
  else if (unit.equals_insensitive("mb"))
    scale = 1000 * 1000;
  else if (unit.equals_insensitive("gb"))
    scale = 1000 * 1000 * 1000;
  else
    return makeError("'" + text + "': unknown unit '" + unit +
                     "' (expected KiB, MiB or GiB)");
  if (number > UINT64_MAX / scale)
    return makeError("'" + text + "' is too large");
  return number * scale;
}

llvm::Expected<std::string> readFile(llvm::StringRef path,
                                     const ReadPolicy &policy) {
  llvm::Expected<std::string> real = confinePath(path, policy);
  if (!real)
    return real.takeError();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: the
  // real path has no link left in it, so a link here was swapped in since.
  int descriptor =
      ::open(real->c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (descriptor < 0) {
    if (errno == ELOOP)
      return makeError(quotePath(path) + ": became a symbolic link while read");
    return makeError(quotePath(path) + ": " + llvm::sys::StrError(errno));
  }
  struct Closer {
    int descriptor;
    ~Closer() { ::close(descriptor); }
  } closer{descriptor};

  struct stat status;
  if (::fstat(descriptor, &status) != 0)
    return makeError(quotePath(path) + ": " + llvm::sys::StrError(errno));
  if (!S_ISREG(status.st_mode))
    return makeError(quotePath(path) + ": " + describeFileType(status.st_mode) +
                     ", not a regular file");
  // Where the opened file really is: a folder of the path replaced by a
  // link after confinePath would show here.
  std::string self = "/proc/self/fd/" + std::to_string(descriptor);
  char opened[PATH_MAX];
  ssize_t length = ::readlink(self.c_str(), opened, sizeof(opened) - 1);
  if (length > 0 &&
      !isInsideRoots(llvm::StringRef(opened, size_t(length)), policy))
    return outsideError(path, llvm::StringRef(opened, size_t(length)), policy);

  auto tooLarge = [&](uint64_t size) {
    return makeError(quotePath(path) + ": " + llvm::Twine(size) +
                     " bytes, over the limit of " +
                     llvm::Twine(policy.maxFileBytes) +
                     " (raise it with --max-file-size)");
  };
  if (uint64_t(status.st_size) > policy.maxFileBytes)
    return tooLarge(uint64_t(status.st_size));
  std::string contents;
  contents.reserve(size_t(status.st_size));
  char chunk[65536];
  while (true) {
    ssize_t count = ::read(descriptor, chunk, sizeof(chunk));
    if (count < 0) {
      if (errno == EINTR)
        continue;
      return makeError(quotePath(path) + ": " + llvm::sys::StrError(errno));
    }
    if (count == 0)
      break;
    contents.append(chunk, size_t(count));
    // Files of /proc and files that grow say less than they hold.
    if (contents.size() > policy.maxFileBytes)
      return tooLarge(contents.size());
  }
  return contents;
}

} // namespace spanc::support
