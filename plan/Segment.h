//===- Segment.h - Token ids and the segments a model call is cut into ----===//
//
// The vocabulary codegen and the runtime share (docs/ARCHITECTURE.md, "The
// plan"): a call's prompt is a list of segments carried out of band.
// `prefix` holds ordinary causal tokens; `span` is one child of a plus,
// encoded apart from its siblings; `tail` is what follows a plus and
// attends to everything before it.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_PLAN_SEGMENT_H
#define SPANC_PLAN_SEGMENT_H

#include <cstdint>
#include <vector>

namespace spanc::plan {

/// Token ids as the tokenizer produces them.
using TokenId = int32_t;

enum class SegmentKind { Prefix, Span, Tail };

/// "prefix", "span" or "tail".
const char *segmentKindName(SegmentKind kind);

/// One segment of a call whose tokens are all known (what the KV cache
/// manager lays out).
struct Segment {
  SegmentKind kind = SegmentKind::Prefix;
  std::vector<TokenId> tokens;
  /// For a span: it is a whole conversation of its own (plus-distribute's
  /// `x ⋈ G(x)`: an inner call's input and output), so it attends to nothing
  /// outside itself, as the inner call that left its blocks did. Other spans
  /// attend to the context before their plus unless the runtime's policy
  /// isolates every span.
  bool ownContext = false;
};

} // namespace spanc::plan

#endif // SPANC_PLAN_SEGMENT_H
