//===- JsonDepth.h - The nesting limit of every JSON document spanc reads -===//
//
// nlohmann's parser is iterative, but what is built from its result is not
// linear in the nesting depth (a JSON Pointer per level, a recursive walk
// per level), so a document nested 100 000 deep cost gigabytes before the
// importer's own limit was reached. Every JSON entry point (spnl JSON on
// the command line and over HTTP, chat and completion bodies) first runs
// this check: a SAX pass of the same parser that stops at the bracket
// opening level kMaxJsonDepth + 1, in time linear in the bytes before it
// and memory linear in the limit, before any document is built.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SUPPORT_JSONDEPTH_H
#define SPANC_SUPPORT_JSONDEPTH_H

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace spanc::support {

/// Objects and arrays nest at most this deep in any JSON spanc reads.
constexpr unsigned kMaxJsonDepth = 256;

/// The byte offset of the '{' or '[' that opens level `maxDepth` + 1 of
/// `text`, found by nlohmann's SAX parser, which stops there; nothing when
/// no bracket goes that deep (or the text is not JSON before one does: the
/// caller's parse reports that).
std::optional<size_t> findJsonDepthExcess(llvm::StringRef text,
                                          unsigned maxDepth = kMaxJsonDepth);

/// Calls `visit(offset, bracket)` for each '{', '}', '[' and ']' of `text`
/// outside strings, in order, until it returns false. On text a JSON
/// parser accepted (up to where it stopped), the n-th '{' met is the n-th
/// object of a pre-order walk.
void forEachJsonBracket(llvm::StringRef text,
                        llvm::function_ref<bool(size_t, char)> visit);

/// "line L, column C" of byte `offset` of `text` (both 1-based), as
/// nlohmann's messages say it.
std::string jsonLineAndColumn(llvm::StringRef text, size_t offset);

} // namespace spanc::support

#endif // SPANC_SUPPORT_JSONDEPTH_H
