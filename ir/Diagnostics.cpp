//===- Diagnostics.cpp - Located errors for IR locations ------------------===//

#include "ir/Diagnostics.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace spanc::ir {

namespace {

bool isContinuationByte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

/// The message cut to kMaxMessage bytes, never inside a UTF-8 character.
std::string shortenMessage(llvm::StringRef message) {
  if (message.size() <= kMaxMessage)
    return message.str();
  size_t end = kMaxMessage;
  while (end > 0 && isContinuationByte(message[end]))
    --end;
  return (message.take_front(end) + "... (" +
          llvm::Twine(message.size() - end) + " more bytes)")
      .str();
}

} // namespace

llvm::SMDiagnostic shortenDiagnostic(const llvm::SMDiagnostic &diagnostic) {
  llvm::StringRef line = diagnostic.getLineContents();
  llvm::StringRef message = diagnostic.getMessage();
  if (line.size() <= kMaxEchoedLine && message.size() <= kMaxMessage)
    return diagnostic;
  std::string shown = line.str();
  if (line.size() > kMaxEchoedLine) {
    // SMDiagnostic::print puts the caret at the column, or just past the
    // line when the column lies beyond it, and the column it prints is the
    // same number: so the window either starts the line (the caret falls in
    // it) or ends just before the column (the caret falls just past it,
    // where the character it points at would be).
    size_t column =
        diagnostic.getColumnNo() < 0 ? 0 : size_t(diagnostic.getColumnNo());
    const size_t context = kMaxEchoedLine / 2;
    if (column + context / 2 < kMaxEchoedLine) {
      size_t end = kMaxEchoedLine;
      while (end > 0 && isContinuationByte(line[end]))
        --end;
      shown = (line.take_front(end) + "...").str();
    } else {
      size_t start = std::min(column, line.size()) - context;
      while (start < line.size() && isContinuationByte(line[start]))
        ++start;
      shown = ("..." + line.slice(start, std::min(column, line.size()))).str();
    }
  }
  llvm::SmallVector<std::pair<unsigned, unsigned>, 1> noRanges;
  return llvm::SMDiagnostic(*diagnostic.getSourceMgr(), diagnostic.getLoc(),
                            diagnostic.getFilename(), diagnostic.getLineNo(),
                            diagnostic.getColumnNo(), diagnostic.getKind(),
                            shortenMessage(message), shown, noRanges);
}

void printMessage(llvm::SourceMgr &sourceMgr, llvm::SMLoc loc,
                  llvm::SourceMgr::DiagKind kind, const llvm::Twine &message) {
  llvm::SMDiagnostic diagnostic =
      shortenDiagnostic(sourceMgr.GetMessage(loc, kind, message));
  if (llvm::SourceMgr::DiagHandlerTy handler = sourceMgr.getDiagHandler())
    handler(diagnostic, sourceMgr.getDiagContext());
  else
    diagnostic.print(nullptr, llvm::errs());
}

void DiagnosticEngine::registerBuffer(llvm::StringRef name, unsigned bufferId) {
  buffers[name] = static_cast<int>(bufferId);
}

Location DiagnosticEngine::getLocation(llvm::SMLoc loc) const {
  if (!loc.isValid())
    return {};
  unsigned bufferId = sourceMgr.FindBufferContainingLoc(loc);
  if (!bufferId)
    return {};
  // SourceMgr::getLineAndColumn (and FindLineNumber, which calls it) finds
  // the column by scanning back to the previous newline, which makes
  // locating every op of a long one-line program (minified JSON)
  // quadratic. An index of line starts answers both by binary search.
  const std::vector<size_t> &starts = lineStarts(bufferId);
  const char *bufferStart =
      sourceMgr.getMemoryBuffer(bufferId)->getBufferStart();
  size_t offset = size_t(loc.getPointer() - bufferStart);
  size_t line = size_t(llvm::upper_bound(starts, offset) - starts.begin());
  unsigned column = unsigned(offset - starts[line - 1]) + 1;
  return {internFileName(
              sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier()),
          unsigned(line), column};
}

const std::vector<size_t> &
DiagnosticEngine::lineStarts(unsigned bufferId) const {
  std::vector<size_t> &starts = lineStartsByBuffer[bufferId];
  if (!starts.empty())
    return starts;
  llvm::StringRef text = sourceMgr.getMemoryBuffer(bufferId)->getBuffer();
  starts.push_back(0);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n')
      starts.push_back(i + 1);
  return starts;
}

llvm::SMLoc DiagnosticEngine::getSMLoc(Location loc) {
  if (!loc.isKnown())
    return {};
  auto [it, inserted] = buffers.try_emplace(loc.file, -1);
  if (inserted) {
    llvm::Expected<std::string> text =
        support::readFile(loc.file, sourcePolicy);
    if (text)
      it->second = static_cast<int>(sourceMgr.AddNewSourceBuffer(
          llvm::MemoryBuffer::getMemBufferCopy(*text, loc.file),
          llvm::SMLoc()));
    else
      llvm::consumeError(text.takeError());
  }
  if (it->second < 0)
    return {};
  unsigned bufferId = static_cast<unsigned>(it->second);
  llvm::StringRef text = sourceMgr.getMemoryBuffer(bufferId)->getBuffer();
  // FindLocForLineAndColumn asserts on columns past the line; clamp first.
  llvm::SMLoc lineStart =
      sourceMgr.FindLocForLineAndColumn(bufferId, loc.line, 1);
  if (!lineStart.isValid())
    return {};
  size_t offset = lineStart.getPointer() - text.data();
  size_t lineEnd = text.find_first_of("\r\n", offset);
  if (lineEnd == llvm::StringRef::npos)
    lineEnd = text.size();
  size_t column = loc.column ? loc.column - 1 : 0;
  if (offset + column > lineEnd)
    column = lineEnd - offset;
  return llvm::SMLoc::getFromPointer(text.data() + offset + column);
}

bool DiagnosticEngine::withinPrintLimit(llvm::SMLoc loc,
                                        llvm::SourceMgr::DiagKind kind) {
  if (errorLimitReported)
    return false;
  // numErrors counts this message already.
  if (kind != llvm::SourceMgr::DK_Error || numErrors <= kMaxPrintedErrors)
    return true;
  errorLimitReported = true;
  printMessage(sourceMgr, loc, llvm::SourceMgr::DK_Note, kTooManyErrors);
  return false;
}

void DiagnosticEngine::emit(Location loc, llvm::SourceMgr::DiagKind kind,
                            const llvm::Twine &message) {
  if (kind == llvm::SourceMgr::DK_Error)
    ++numErrors;
  if (muted)
    return;
  llvm::SMLoc smLoc = getSMLoc(loc);
  if (!withinPrintLimit(smLoc, kind))
    return;
  if (smLoc.isValid()) {
    printMessage(sourceMgr, smLoc, kind, message);
    return;
  }
  // No source text: still say where, in the usual form.
  llvm::SMDiagnostic diagnostic(sourceMgr, llvm::SMLoc(),
                                loc.isKnown() ? loc.file : "spanc",
                                loc.isKnown() ? int(loc.line) : -1,
                                loc.isKnown() ? int(loc.column) - 1 : -1, kind,
                                shortenMessage(message.str()), "", {});
  // Through the SourceMgr's handler when there is one, like the rest.
  if (llvm::SourceMgr::DiagHandlerTy handler = sourceMgr.getDiagHandler())
    handler(diagnostic, sourceMgr.getDiagContext());
  else
    diagnostic.print(nullptr, llvm::errs());
}

void DiagnosticEngine::emit(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
                            const llvm::Twine &message) {
  if (kind == llvm::SourceMgr::DK_Error)
    ++numErrors;
  if (!muted && withinPrintLimit(loc, kind))
    printMessage(sourceMgr, loc, kind, message);
}

} // namespace spanc::ir
