//===- KvEventSink.h - Where the block pool reports cache changes ---------===//
//
// The narrow hook through which the cache tells an observer what it holds
// (spanc serve's KV event publisher, server/KvEventPublisher.h): a block
// entering the hash index, and one leaving it (evicted, or uncached before
// its contents change). Plain records and one interface, so the cache
// depends on no transport; the sink is called on the thread that changes
// the pool (the engine thread) and must not call back into it.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_KVEVENTSINK_H
#define SPANC_RUNTIME_KV_KVEVENTSINK_H

#include "plan/Segment.h"
#include "runtime/kv/BlockHash.h"

#include "llvm/ADT/ArrayRef.h"

namespace spanc::kv {

/// A block that just entered the hash index. `parent` is the hash its own
/// hash chains from (BlockHasher::hashBlock): the block before it in its
/// segment, or for a segment's first block the segment's context, which is
/// the hasher's root for a span and for the start of a call. A span's
/// blocks therefore form a chain of their own, apart from the prefix
/// before them.
struct StoredBlock {
  BlockHash hash;
  BlockHash parent;
  bool parentIsRoot = false;
  plan::SegmentKind kind = plan::SegmentKind::Prefix;
  /// Its valid tokens (fewer than the block size for a partial block);
  /// only valid during the call.
  llvm::ArrayRef<plan::TokenId> tokens;
};

class KvEventSink {
public:
  virtual ~KvEventSink() = default;
  virtual void blockStored(const StoredBlock &block) = 0;
  /// `hash` left the index: the block was evicted or is about to change.
  virtual void blockRemoved(const BlockHash &hash) = 0;
};

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_KVEVENTSINK_H
