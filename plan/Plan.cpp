//===- Plan.cpp - The physical plan's value types -------------------------===//

#include "plan/Plan.h"
#include "plan/MessageEncoder.h"

namespace spanc::plan {

MessageEncoder::~MessageEncoder() = default;

const char *segmentKindName(SegmentKind kind) {
  switch (kind) {
  case SegmentKind::Prefix:
    return "prefix";
  case SegmentKind::Span:
    return "span";
  case SegmentKind::Tail:
    return "tail";
  }
  return "?";
}

std::optional<std::vector<TokenId>>
resolveSegment(const PlanSegment &segment,
               llvm::ArrayRef<std::optional<std::vector<TokenId>>> outputs) {
  std::vector<TokenId> tokens;
  for (const Piece &piece : segment.pieces) {
    tokens.insert(tokens.end(), piece.tokens.begin(), piece.tokens.end());
    if (!piece.call)
      continue;
    if (*piece.call >= outputs.size() || !outputs[*piece.call])
      return std::nullopt;
    const std::vector<TokenId> &output = *outputs[*piece.call];
    tokens.insert(tokens.end(), output.begin(), output.end());
    tokens.insert(tokens.end(), piece.trailer.begin(), piece.trailer.end());
  }
  return tokens;
}

uint64_t knownPromptTokens(const Call &call) {
  uint64_t tokens = 0;
  for (const PlanSegment &segment : call.segments)
    for (const Piece &piece : segment.pieces)
      tokens += piece.tokens.size() + (piece.call ? piece.trailer.size() : 0);
  return tokens;
}

std::optional<std::vector<Segment>>
resolveCall(const Call &call,
            llvm::ArrayRef<std::optional<std::vector<TokenId>>> outputs) {
  std::vector<Segment> segments;
  for (const PlanSegment &segment : call.segments) {
    std::optional<std::vector<TokenId>> tokens =
        resolveSegment(segment, outputs);
    if (!tokens)
      return std::nullopt;
    segments.push_back({segment.kind, std::move(*tokens), segment.ownContext});
  }
  return segments;
}

} // namespace spanc::plan
