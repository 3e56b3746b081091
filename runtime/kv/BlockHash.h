//===- BlockHash.h - Content hashes of KV cache blocks --------------------===//
//
// A block's hash names exactly what its KV depends on: the model, the block's
// own tokens (and how many there are, so partial blocks are keys too) and the
// context the block attended to, carried by the parent hash. Segment kinds
// enter only through the parent (docs/ARCHITECTURE.md, "The plan"): a span and
// the start of a standalone call both chain from the model's empty-context
// root, so a span hashes the same at any offset and an outer call hits what an
// inner call left behind. XXH3-128 with a streaming state; no allocation.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_BLOCKHASH_H
#define SPANC_RUNTIME_KV_BLOCKHASH_H

#include "plan/Segment.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMapInfo.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace spanc::kv {

using plan::TokenId;

/// A 128-bit XXH3 digest.
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  bool operator==(const BlockHash &other) const {
    return low == other.low && high == other.high;
  }
  bool operator!=(const BlockHash &other) const { return !(*this == other); }
  /// 32 lowercase hex digits, high word first (for plans and logs).
  std::string str() const;
};

/// Hashes blocks for one model. Cheap to copy.
class BlockHasher {
public:
  /// `modelId` identifies the weights (e.g. the GGUF's name and a digest of
  /// its tensor data); every hash depends on it.
  explicit BlockHasher(llvm::StringRef modelId);

  /// The empty-context root: the parent of a span's first block and of the
  /// first block of a call that starts with nothing before it.
  const BlockHash &root() const { return root_; }
  const BlockHash &modelHash() const { return model_; }

  /// The hash of one block holding `tokens` (1 to block size; fewer than a
  /// full block for a partial last block) after the context `parent`.
  BlockHash hashBlock(const BlockHash &parent,
                      llvm::ArrayRef<TokenId> tokens) const;

  /// The context after a segment that attended only to itself (a span) and
  /// ended with hash `segmentFinal`, following context `context`. Order
  /// matters: join(join(c, A), B) != join(join(c, B), A). A span after the
  /// empty context leaves the same context a causal segment with the same
  /// tokens would (both attended to nothing before them).
  BlockHash join(const BlockHash &context, const BlockHash &segmentFinal) const;

  /// Hashes of consecutive blocks of `tokens`, `blockSize` tokens each (the
  /// last one may be partial), chained from `parent`. Appends to `out`.
  void hashChain(const BlockHash &parent, llvm::ArrayRef<TokenId> tokens,
                 unsigned blockSize,
                 llvm::SmallVectorImpl<BlockHash> &out) const;

private:
  BlockHash model_;
  BlockHash root_;
};

} // namespace spanc::kv

namespace llvm {
// Reserved keys: a real XXH3-128 digest equal to either is a 2^-127 event.
template <> struct DenseMapInfo<spanc::kv::BlockHash> {
  static spanc::kv::BlockHash getEmptyKey() { return {~0ULL, ~0ULL}; }
  static spanc::kv::BlockHash getTombstoneKey() { return {~0ULL - 1, ~0ULL}; }
  static unsigned getHashValue(const spanc::kv::BlockHash &hash) {
    return unsigned(hash.low ^ (hash.low >> 32));
  }
  static bool isEqual(const spanc::kv::BlockHash &a,
                      const spanc::kv::BlockHash &b) {
    return a == b;
  }
};
} // namespace llvm

#endif // SPANC_RUNTIME_KV_BLOCKHASH_H
