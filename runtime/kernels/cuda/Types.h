//===- Types.h - The shapes and views the CUDA kernels share --------------===//
//
// Plain structs over raw device pointers, the bottom of the CUDA kernels:
// they mirror what the CPU kernels take (cpu::RowShape, cpu::PagedKvView,
// cpu::RopeTable) without including them, so the backend converts its own
// types field by field and the kernels depend on nothing of the runtime.
// Every pointer in these structs is device memory unless a comment says
// otherwise; every stride is in elements.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_TYPES_H
#define SPANC_RUNTIME_KERNELS_CUDA_TYPES_H

#include <cstdint>

namespace spanc::cuda {

/// A block of `rows` rows of `cols` elements (cpu::RowShape).
struct RowShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inputStride = 0;  ///< elements between input rows
  int64_t outputStride = 0; ///< elements between output rows
};

/// How K/V elements are stored (cpu::KvPrecision): f32, or IEEE half bits
/// in a uint16_t.
enum class KvPrecision { F32, F16 };

inline int kvElementBytes(KvPrecision precision) {
  return precision == KvPrecision::F16 ? 2 : 4;
}

/// The paged K/V pool of every layer, laid out as backend::KvStorage lays out
/// one: per layer a K array [block][kvHead][headDim][slot] (dimension-major
/// inside a block) and a V array [block][kvHead][slot][headDim]. Layer l's
/// K starts at keys + l * layerStride elements, its V at values + l *
/// layerStride (KvStorage interleaves K and V of a layer in one mapping:
/// values = keys + one layer's K, layerStride = two layers' worth).
struct KvPoolView {
  void *keys = nullptr;
  void *values = nullptr;
  int numLayers = 0;
  int numKvHeads = 0;
  int headDim = 0;
  int blockSize = 16;
  int64_t numBlocks = 0;
  int64_t layerStride = 0; ///< elements between consecutive layers
  int64_t blockStride = 0; ///< elements between blocks of one layer
  int64_t headStride = 0;  ///< elements between KV heads of one block
  KvPrecision precision = KvPrecision::F16;
};

/// One layer of the pool as attention reads it (cpu::PagedKvView).
struct PagedKvView {
  const void *keys = nullptr;
  const void *values = nullptr;
  KvPrecision precision = KvPrecision::F16;
  int64_t blockStride = 0;
  int64_t headStride = 0;
  int blockSize = 16;
};

inline PagedKvView layerView(const KvPoolView &pool, int layer) {
  const int64_t offset =
      int64_t(layer) * pool.layerStride * kvElementBytes(pool.precision);
  PagedKvView view;
  view.keys = static_cast<const char *>(pool.keys) + offset;
  view.values = static_cast<const char *>(pool.values) + offset;
  view.precision = pool.precision;
  view.blockStride = pool.blockStride;
  view.headStride = pool.headStride;
  view.blockSize = pool.blockSize;
  return view;
}

/// Which dimensions form a rotating pair (cpu::RopeOrder): Normal pairs
/// (2i, 2i+1) (Llama), NeoX pairs (i, i + rotaryDim/2) (Qwen2).
enum class RopeOrder { Normal, NeoX };

/// A device copy of a cpu::RopeTable's rows: row p (p < numPositions) is
/// rotaryDim floats at cosSin + p * rotaryDim, cos of the rotaryDim/2
/// pairs then their sin (the bytes of RopeTable::row(0) onwards), so GPU
/// and CPU rotate with the very same values.
struct RopeTableView {
  const float *cosSin = nullptr;
  int64_t numPositions = 0;
  int rotaryDim = 0;
  int headDim = 0;
  RopeOrder order = RopeOrder::Normal;
};

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_TYPES_H
