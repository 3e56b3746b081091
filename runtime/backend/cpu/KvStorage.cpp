//===- KvStorage.cpp - Physical K/V memory in fixed-size blocks -----------===//

#include "runtime/backend/cpu/KvStorage.h"

#include "runtime/kernels/Limits.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/RowLoop.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace spanc::backend {

namespace {

using kernels::kMaxHeadDim;

/// Faults in [memory, memory + bytes) for writing, without changing it
/// (fresh anonymous memory reads as zero): MADV_POPULATE_WRITE where the
/// kernel has it (Linux 5.14), else a zero written to every page.
void prefault(char *memory, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(memory, bytes, MADV_POPULATE_WRITE) == 0)
    return;
#endif
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t offset = 0; offset < bytes; offset += page)
    memory[offset] = 0;
}

/// Runs x heads from which a write is split between the threads.
constexpr int64_t kMinParallelRuns = 8;

/// Stores one run of `count` (<= 16) tokens into consecutive slots
/// [firstSlot, firstSlot + count) of one block and head, any precision.
template <typename Element>
void writeRunScalar(int headDim, int blockSize, int firstSlot, int count,
                    const float *keys, const float *values, int64_t rowStride,
                    Element *keyBlock, Element *valueBlock) {
  for (int token = 0; token < count; ++token) {
    const float *key = keys + token * rowStride;
    const float *value = values + token * rowStride;
    const int slot = firstSlot + token;
    for (int dim = 0; dim < headDim; ++dim) {
      cpu::storeElement(keyBlock + dim * blockSize + slot, key[dim]);
      cpu::storeElement(valueBlock + slot * headDim + dim, value[dim]);
    }
  }
}

/// The same on the AVX2 path (headDim % 8 == 0): each row converted 8
/// lanes at a time (F16C: the bits of the scalar conversion), K's
/// elements then stored one by one into the dimension-major block.
template <typename Element>
SPANC_AVX2 void writeRunAvx2(int headDim, int blockSize, int firstSlot,
                             int count, const float *keys, const float *values,
                             int64_t rowStride, Element *keyBlock,
                             Element *valueBlock) {
  alignas(32) Element row[kMaxHeadDim];
  for (int token = 0; token < count; ++token) {
    const float *key = keys + token * rowStride;
    const float *value = values + token * rowStride;
    const int slot = firstSlot + token;
    for (int dim = 0; dim < headDim; dim += 8)
      cpu::store8(row + dim, cpu::load8(key + dim));
    for (int dim = 0; dim < headDim; ++dim)
      keyBlock[dim * blockSize + slot] = row[dim];
    Element *out = valueBlock + slot * headDim;
    for (int dim = 0; dim < headDim; dim += 8)
      cpu::store8(out + dim, cpu::load8(value + dim));
  }
}

/// The same for 16-slot blocks and headDim % 16 == 0: K's transpose is, for
/// a whole block, 16 token rows of 16 dims transposed in registers, else
/// one gather of the run's tokens per dimension (a 16-lane column of the
/// token-major rows), stored as one masked row of the dimension-major block.
template <typename Element>
SPANC_AVX512 void writeRunAvx512(int headDim, int firstSlot, int count,
                                 const float *keys, const float *values,
                                 int64_t rowStride, Element *keyBlock,
                                 Element *valueBlock) {
  // Lane j is slot j of the block; slots [firstSlot, firstSlot + count)
  // read tokens 0 .. count-1 of the run, the others are left untouched.
  const __mmask16 slots = __mmask16(((1u << count) - 1) << firstSlot);
  const __m512i token = _mm512_sub_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(firstSlot));
  // (Lanes before firstSlot get negative indices; the gather masks them
  // off and never reads there.)
  const __m512i indices =
      _mm512_mullo_epi32(token, _mm512_set1_epi32(int(rowStride)));
  if (count <= 2) {
    // Decode: one token per sequence. Converting its row (4 vectors) and
    // storing each dimension's element is cheaper than a gather per
    // dimension with one active lane.
    alignas(64) Element row[kMaxHeadDim];
    for (int index = 0; index < count; ++index) {
      const float *key = keys + index * rowStride;
      for (int dim = 0; dim < headDim; dim += 16)
        cpu::store16(row + dim, cpu::load16(key + dim));
      Element *out = keyBlock + firstSlot + index;
      for (int dim = 0; dim < headDim; ++dim)
        out[dim * 16] = row[dim];
    }
  } else if (count == 16) {
    for (int chunk = 0; chunk < headDim; chunk += 16) {
      __m512i rows[16];
      for (int index = 0; index < 16; ++index)
        rows[index] = _mm512_castps_si512(
            _mm512_loadu_ps(keys + index * rowStride + chunk));
      cpu::transpose16(rows);
      for (int dim = 0; dim < 16; ++dim)
        cpu::store16(keyBlock + (chunk + dim) * 16,
                     _mm512_castsi512_ps(rows[dim]));
    }
  } else {
    for (int dim = 0; dim < headDim; ++dim) {
      __m512 column = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), slots,
                                               indices, keys + dim, 4);
      cpu::store16(slots, keyBlock + dim * 16, column);
    }
  }
  for (int token = 0; token < count; ++token) {
    const float *value = values + token * rowStride;
    Element *out = valueBlock + (firstSlot + token) * headDim;
    for (int dim = 0; dim < headDim; dim += 16)
      cpu::store16(out + dim, cpu::load16(value + dim));
  }
}

} // namespace

KvStorage::KvStorage(const KvStorageConfig &config) : config_(config) {
  headStride_ = int64_t(config.headDim) * config.blockSize;
  blockStride_ = headStride_ * config.numKvHeads;
  layerStride_ = blockStride_ * config.numBlocks;
  sizeInBytes_ = layerStride_ * 2 * config.numLayers *
                 int64_t(cpu::kvElementBytes(config.precision));
}

KvStorage::~KvStorage() {
  if (memory_)
    munmap(memory_, size_t(sizeInBytes_));
}

llvm::Expected<std::unique_ptr<KvStorage>>
KvStorage::create(const KvStorageConfig &config) {
  if (config.numLayers <= 0 || config.numKvHeads <= 0 || config.headDim <= 0 ||
      config.blockSize <= 0 || config.numBlocks <= 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "KV storage: layers (%d), KV heads (%d), head dim (%d), block size "
        "(%d) and blocks (%lld) must all be positive",
        config.numLayers, config.numKvHeads, config.headDim, config.blockSize,
        (long long)config.numBlocks);
  // The attention kernels' and the write path's fixed arrays
  // (runtime/kernels/Limits.h).
  if (config.blockSize > kernels::kMaxBlockSize)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "KV storage: block size %d exceeds %d",
                                   config.blockSize, kernels::kMaxBlockSize);
  if (config.headDim > kernels::kMaxHeadDim)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "KV storage: head dim %d exceeds %d",
                                   config.headDim, kernels::kMaxHeadDim);
  std::unique_ptr<KvStorage> storage(new KvStorage(config));
  void *memory =
      mmap(nullptr, size_t(storage->sizeInBytes_), PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "KV storage: cannot map %lld bytes for %lld blocks",
        (long long)storage->sizeInBytes_, (long long)config.numBlocks);
  // Transparent huge pages where the kernel allows them (madvise mode):
  // relocation, copies and attention stream K/V of many blocks, and 4 KiB
  // pages made that a stream of TLB misses (costly under a hypervisor).
  // Advisory only: without THP the storage works the same.
  madvise(memory, size_t(storage->sizeInBytes_), MADV_HUGEPAGE);
  if (config.prefault)
    prefault(static_cast<char *>(memory), size_t(storage->sizeInBytes_));
  storage->memory_ = static_cast<char *>(memory);
  return storage;
}

float KvStorage::key(int layer, int64_t block, int kvHead, int slot,
                     int dim) const {
  auto *self = const_cast<KvStorage *>(this);
  const int64_t offset = dim * keyDimStride() + slot * keySlotStride();
  if (config_.precision == cpu::KvPrecision::F16)
    return cpu::halfToFloat(self->keys<uint16_t>(layer, block, kvHead)[offset]);
  return self->keys<float>(layer, block, kvHead)[offset];
}

float KvStorage::value(int layer, int64_t block, int kvHead, int slot,
                       int dim) const {
  auto *self = const_cast<KvStorage *>(this);
  const int64_t offset = slot * valueSlotStride() + dim;
  if (config_.precision == cpu::KvPrecision::F16)
    return cpu::halfToFloat(
        self->values<uint16_t>(layer, block, kvHead)[offset]);
  return self->values<float>(layer, block, kvHead)[offset];
}

void KvStorage::tokenDistances(int layer, int64_t a, int64_t b, int numTokens,
                               float *out) const {
  for (int slot = 0; slot < numTokens; ++slot) {
    double sum = 0;
    for (int head = 0; head < config_.numKvHeads; ++head)
      for (int dim = 0; dim < config_.headDim; ++dim) {
        double dk = double(key(layer, a, head, slot, dim)) -
                    key(layer, b, head, slot, dim);
        double dv = double(value(layer, a, head, slot, dim)) -
                    value(layer, b, head, slot, dim);
        sum += dk * dk + dv * dv;
      }
    out[slot] = float(sum);
  }
}

void KvStorage::writeToken(int layer, int64_t block, int slot, const float *key,
                           const float *value) {
  const int32_t blockId = int32_t(block), slotIndex = slot;
  writeTokens(layer, 1, &blockId, &slotIndex, key, value, 0);
}

void KvStorage::writeTokens(int layer, int64_t count, const int32_t *slotBlocks,
                            const int32_t *slotIndices, const float *keys,
                            const float *values, int64_t rowStride) {
  const int headDim = config_.headDim;
  const int blockSize = config_.blockSize;
  const int numHeads = config_.numKvHeads;
  const bool half = config_.precision == cpu::KvPrecision::F16;
  const cpu::CpuFeatures &features = cpu::cpuFeatures();
  const bool vector =
      features.hasAvx512() && blockSize == 16 && headDim % 16 == 0;
  const bool avx2 = !vector && features.avx2 && features.f16c &&
                    headDim % 8 == 0 && headDim <= kMaxHeadDim;
  // Runs: maximal groups of tokens in consecutive slots of one block (a
  // prefill chunk is a few full blocks; a decode step one token each).
  // Found on the fly by each item from its start token: item i covers the
  // run starting at token i, if one starts there.
  auto writeRun = [&](int64_t first, int length, int head) {
    const int64_t block = slotBlocks[first];
    const int firstSlot = slotIndices[first];
    const float *runKeys = keys + first * rowStride + head * headDim;
    const float *runValues = values + first * rowStride + head * headDim;
    auto writeTyped = [&](auto *keyBlock, auto *valueBlock) {
      if (vector)
        writeRunAvx512(headDim, firstSlot, length, runKeys, runValues,
                       rowStride, keyBlock, valueBlock);
      else if (avx2)
        writeRunAvx2(headDim, blockSize, firstSlot, length, runKeys, runValues,
                     rowStride, keyBlock, valueBlock);
      else
        writeRunScalar(headDim, blockSize, firstSlot, length, runKeys,
                       runValues, rowStride, keyBlock, valueBlock);
    };
    if (half)
      writeTyped(this->keys<uint16_t>(layer, block, head),
                 this->values<uint16_t>(layer, block, head));
    else
      writeTyped(this->keys<float>(layer, block, head),
                 this->values<float>(layer, block, head));
  };
  // Runs: maximal groups of tokens in consecutive slots of one block (a
  // prefill chunk is a few full blocks, a decode step one token per
  // sequence); runStarts_ ends with `count`.
  runStarts_.clear();
  for (int64_t token = 0; token < count; ++token)
    if (token == 0 || slotBlocks[token] != slotBlocks[token - 1] ||
        slotIndices[token] != slotIndices[token - 1] + 1)
      runStarts_.push_back(token);
  runStarts_.push_back(count);
  // A prompt's runs are split between the threads (the main thread alone
  // wrote a 512-token chunk of a layer in ~0.06 ms while the others
  // waited, 2 % of a prefill); a decode step's few runs cost less than
  // waking them. Runs sharing a block write disjoint slots, with masked
  // or per-element stores.
  const int64_t numRuns = int64_t(runStarts_.size()) - 1;
  const int64_t items = numRuns * numHeads;
  cpu::forEachRow(items, items >= kMinParallelRuns, [&](int64_t item) {
    const int64_t run = item / numHeads;
    writeRun(runStarts_[size_t(run)],
             int(runStarts_[size_t(run + 1)] - runStarts_[size_t(run)]),
             int(item % numHeads));
  });
}

void KvStorage::copyBlock(int64_t source, int64_t destination) {
  const size_t bytes = size_t(blockStride_) * size_t(elementBytes());
  for (int layer = 0; layer < config_.numLayers; ++layer) {
    std::memcpy(keyData(layer, destination, 0), keyData(layer, source, 0),
                bytes);
    std::memcpy(valueData(layer, destination, 0), valueData(layer, source, 0),
                bytes);
  }
}

cpu::PagedKvView KvStorage::layerView(int layer) const {
  auto *self = const_cast<KvStorage *>(this);
  cpu::PagedKvView view;
  view.keys = self->keyData(layer, 0, 0);
  view.values = self->valueData(layer, 0, 0);
  view.precision = config_.precision;
  view.blockStride = blockStride_;
  view.headStride = headStride_;
  view.blockSize = config_.blockSize;
  return view;
}

} // namespace spanc::backend
