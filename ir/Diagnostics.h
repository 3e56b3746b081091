//===- Diagnostics.h - Located errors for IR locations --------------------===//
//
// Prints `file:line:col: error: message`, the source line and a caret for an
// ir::Location through llvm::SourceMgr. Buffers the frontend already loaded
// are registered by name; other files named by a location (e.g. a `loc(...)`
// in a .ir file) are loaded on first use where the source read policy
// allows (a .ir program names any file it likes: showing a line of
// /etc/shadow, or reading /dev/zero, is not a diagnostic's business), and
// when a file cannot be read the message is printed without the source
// line. A long source line (minified JSON, a one-line program of
// megabytes) is cut to a window around the column, and a long message to
// its start, so a diagnostic stays a few hundred bytes whatever the input;
// and after kMaxPrintedErrors errors the rest are counted, not printed (a
// one-line program of 100 000 errors printed 25 MB in 250 s: each message
// scans its line).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_DIAGNOSTICS_H
#define SPANC_IR_DIAGNOSTICS_H

#include "ir/IR.h"
#include "support/FileAccess.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SourceMgr.h"

#include <vector>

namespace spanc::ir {

/// `diagnostic` with its source line cut to at most about kMaxEchoedLine
/// bytes around its column (marked "...") and its message to kMaxMessage
/// bytes; short ones are returned as they are.
constexpr size_t kMaxEchoedLine = 160;
constexpr size_t kMaxMessage = 1024;
/// Errors printed for one input; later messages are counted only.
constexpr unsigned kMaxPrintedErrors = 64;
/// The note that ends the printed errors.
constexpr const char *kTooManyErrors =
    "too many errors: the rest are not shown";
llvm::SMDiagnostic shortenDiagnostic(const llvm::SMDiagnostic &diagnostic);

/// SourceMgr::PrintMessage, shortened (shortenDiagnostic): to the
/// SourceMgr's handler when it has one, else to stderr.
void printMessage(llvm::SourceMgr &sourceMgr, llvm::SMLoc loc,
                  llvm::SourceMgr::DiagKind kind, const llvm::Twine &message);

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(llvm::SourceMgr &sourceMgr)
      : sourceMgr(sourceMgr) {}

  llvm::SourceMgr &getSourceMgr() { return sourceMgr; }

  /// Makes locations in file `name` resolve to buffer `bufferId`.
  void registerBuffer(llvm::StringRef name, unsigned bufferId);

  /// Where files named by locations may be read (the program's read
  /// policy); by default none is.
  void setSourceReadPolicy(support::ReadPolicy policy) {
    sourcePolicy = std::move(policy);
  }

  /// The location of `loc` in `bufferId` as file, line, column.
  Location getLocation(llvm::SMLoc loc) const;
  /// The SourceMgr location for `loc`, loading its file if needed; an
  /// invalid SMLoc when the file cannot be read.
  llvm::SMLoc getSMLoc(Location loc);

  void error(Location loc, const llvm::Twine &message) {
    emit(loc, llvm::SourceMgr::DK_Error, message);
  }
  void warning(Location loc, const llvm::Twine &message) {
    emit(loc, llvm::SourceMgr::DK_Warning, message);
  }
  void note(Location loc, const llvm::Twine &message) {
    emit(loc, llvm::SourceMgr::DK_Note, message);
  }
  void emit(Location loc, llvm::SourceMgr::DiagKind kind,
            const llvm::Twine &message);
  /// For problems that have an SMLoc but no op (the IR parser).
  void emit(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
            const llvm::Twine &message);

  unsigned getNumErrors() const { return numErrors; }
  /// While muted, messages are counted but not printed (the frontend
  /// checks each `let` once and inlines it quietly afterwards).
  void setMuted(bool muted) { this->muted = muted; }
  bool isMuted() const { return muted; }

private:
  /// The offset of each line's first byte in buffer `bufferId` (built on
  /// first use): lines are numbered as SourceMgr numbers them, by '\n'.
  const std::vector<size_t> &lineStarts(unsigned bufferId) const;

  llvm::SourceMgr &sourceMgr;
  mutable llvm::DenseMap<unsigned, std::vector<size_t>> lineStartsByBuffer;
  llvm::StringMap<int> buffers; // name -> buffer id, or -1 if unreadable
  support::ReadPolicy sourcePolicy;
  /// Whether this message is printed: not once kMaxPrintedErrors errors
  /// were (the note saying so is printed instead, once).
  bool withinPrintLimit(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind);

  unsigned numErrors = 0;
  bool muted = false;
  bool errorLimitReported = false;
};

} // namespace spanc::ir

#endif // SPANC_IR_DIAGNOSTICS_H
