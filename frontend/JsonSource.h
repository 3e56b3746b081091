//===- JsonSource.h - A JSON document read from a buffer, with locations --===//
//
// The spnl importer's reader: parses a SourceMgr buffer as JSON and keeps
// where each object and array begins, so that errors point at their node.
// Refused at their place, before any import: nesting past
// support::kMaxJsonDepth (found before a document is built), syntax errors,
// numbers that do not fit a double, and a key its object already has (a
// JSON reader keeps only the last value and drops the first without a
// word).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_JSONSOURCE_H
#define SPANC_FRONTEND_JSONSOURCE_H

#include "ir/Diagnostics.h"
#include "ir/IR.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace spanc::frontend {

// Ordered, so that a walk over the document meets objects in text order
// (which is how nodes get their locations).
using Json = nlohmann::ordered_json;

class JsonSource {
public:
  /// Parses buffer `bufferId` of the engine's SourceMgr; null after
  /// reporting why it is not a JSON document spanc reads.
  static std::unique_ptr<JsonSource> parse(unsigned bufferId,
                                           ir::DiagnosticEngine &diagnostics);

  /// The nodes point into the document, so it stays where it is.
  JsonSource(const JsonSource &) = delete;
  JsonSource &operator=(const JsonSource &) = delete;

  const Json &getDocument() const { return document; }
  /// Whether `node` (of this document) has a place of its own: objects and
  /// arrays do; a scalar is located by its parent.
  bool isLocated(const Json &node) const { return offsets.count(&node); }
  /// Where `node` begins; the buffer's start for a node without a place.
  ir::Location locate(const Json &node) const;

private:
  JsonSource(unsigned bufferId, ir::DiagnosticEngine &diagnostics);
  bool read();
  llvm::SMLoc at(size_t offset) const;
  bool reportDuplicateKeys(llvm::StringRef text);
  void locateNodes(llvm::StringRef text);

  ir::DiagnosticEngine &diagnostics;
  const llvm::MemoryBuffer *buffer;
  Json document;
  llvm::DenseMap<const Json *, uint32_t> offsets;
};

/// What `value` is, for messages: "an object", "an integer", "null", ...
const char *describeJsonKind(const Json &value);

/// A JSON Pointer segment (RFC 6901): '~' and '/' escaped.
std::string pointerSegment(llvm::StringRef key);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_JSONSOURCE_H
