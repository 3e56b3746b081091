//===- BlockHash.cpp - Content hashes of KV cache blocks ------------------===//

#include "runtime/kv/BlockHash.h"

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>

namespace spanc::kv {

namespace {

// Domain tags keep the three kinds of hash inputs from ever colliding with
// one another (a block hash input could otherwise equal a join input).
constexpr uint32_t ModelTag = 0x4D4F444C; // "MODL"
constexpr uint32_t RootTag = 0x524F4F54;  // "ROOT"
constexpr uint32_t BlockTag = 0x424C4F4B; // "BLOK"
constexpr uint32_t JoinTag = 0x4A4F494E;  // "JOIN"

/// Streaming XXH3-128 over fixed-width little-endian fields.
class Digest {
public:
  Digest() { XXH3_128bits_reset(&state_); }
  void add(const void *data, size_t size) {
    XXH3_128bits_update(&state_, data, size);
  }
  void add(uint32_t value) { add(&value, sizeof(value)); }
  void add(const BlockHash &hash) {
    add(&hash.low, sizeof(hash.low));
    add(&hash.high, sizeof(hash.high));
  }
  BlockHash finish() {
    XXH128_hash_t digest = XXH3_128bits_digest(&state_);
    return {digest.low64, digest.high64};
  }

private:
  XXH3_state_t state_;
};

static_assert(sizeof(TokenId) == 4, "tokens are hashed as 32-bit words");

} // namespace

std::string BlockHash::str() const {
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx",
                static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return text;
}

BlockHasher::BlockHasher(llvm::StringRef modelId) {
  Digest model;
  model.add(ModelTag);
  model.add(uint32_t(modelId.size()));
  model.add(modelId.data(), modelId.size());
  model_ = model.finish();
  Digest root;
  root.add(RootTag);
  root.add(model_);
  root_ = root.finish();
}

BlockHash BlockHasher::hashBlock(const BlockHash &parent,
                                 llvm::ArrayRef<TokenId> tokens) const {
  assert(!tokens.empty() && "a block holds at least one token");
  Digest digest;
  digest.add(BlockTag);
  digest.add(parent);
  digest.add(model_);
  // The length makes a partial block a different key from any full block
  // that starts with the same tokens.
  digest.add(uint32_t(tokens.size()));
  digest.add(tokens.data(), tokens.size() * sizeof(TokenId));
  return digest.finish();
}

BlockHash BlockHasher::join(const BlockHash &context,
                            const BlockHash &segmentFinal) const {
  if (context == root_)
    return segmentFinal;
  Digest digest;
  digest.add(JoinTag);
  digest.add(context);
  digest.add(segmentFinal);
  digest.add(model_);
  return digest.finish();
}

void BlockHasher::hashChain(const BlockHash &parent,
                            llvm::ArrayRef<TokenId> tokens, unsigned blockSize,
                            llvm::SmallVectorImpl<BlockHash> &out) const {
  assert(blockSize > 0);
  BlockHash previous = parent;
  for (size_t start = 0; start < tokens.size(); start += blockSize) {
    size_t count = std::min<size_t>(blockSize, tokens.size() - start);
    previous = hashBlock(previous, tokens.slice(start, count));
    out.push_back(previous);
  }
}

} // namespace spanc::kv
