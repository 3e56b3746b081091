//===- Gemm.cpp - Weight GEMMs through oneDNN matmul ----------------------===//

#include "runtime/kernels/cpu/Gemm.h"

#include "runtime/kernels/cpu/AmxGemm.h"
#include "runtime/kernels/cpu/Avx512Bf16Gemm.h"
#include "runtime/kernels/cpu/CpuFeatures.h"
#include "runtime/kernels/cpu/Elementwise.h"

#include "llvm/ADT/DenseMap.h"

#include <dnnl.hpp>
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <vector>

namespace spanc::cpu {

namespace {

using Tag = dnnl::memory::format_tag;
using DataType = dnnl::memory::data_type;

/// The M for which the weight layout is chosen. oneDNN's AMX/AVX-512
/// brgemm accepts that blocked layout for every other M as well, so one
/// copy of each weight serves prefill and decode.
constexpr int64_t kLayoutRows = 256;

DataType dataType(GemmPrecision precision) {
  return precision == GemmPrecision::Bf16 ? DataType::bf16 : DataType::f32;
}

llvm::Error dnnlError(const dnnl::error &error, const char *what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "oneDNN %s: %s", what, error.what());
}

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void
convertToBf16Native(const float *source, uint16_t *destination, int64_t count) {
  int64_t index = 0;
  for (; index + 16 <= count; index += 16) {
    __m256bh packed = _mm512_cvtneps_pbh(_mm512_loadu_ps(source + index));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(destination + index),
                        reinterpret_cast<__m256i &>(packed));
  }
  for (; index < count; ++index) {
    uint32_t bits;
    std::memcpy(&bits, source + index, sizeof(bits));
    bits += 0x7fff + ((bits >> 16) & 1);
    destination[index] = uint16_t(bits >> 16);
  }
}

/// Caps oneDNN's JIT at the process's kernel path (CpuFeatures.h), once,
/// before its first primitive: a capped run must not multiply with
/// instructions above its cap. Without a cap oneDNN picks its best.
void capOneDnnIsa() {
  static const bool capped = [] {
    dnnl::cpu_isa isa = dnnl::cpu_isa::all;
    switch (isaLevel()) {
    case IsaLevel::Scalar: // oneDNN's lowest JIT level; no pure C path
      isa = dnnl::cpu_isa::sse41;
      break;
    case IsaLevel::Avx2:
      isa = dnnl::cpu_isa::avx2;
      break;
    case IsaLevel::Avx512:
      isa = dnnl::cpu_isa::avx512_core;
      break;
    case IsaLevel::Avx512Bf16:
      isa = dnnl::cpu_isa::avx512_core_bf16;
      break;
    case IsaLevel::Amx:
      break;
    }
    if (isa == dnnl::cpu_isa::all ||
        dnnl::set_max_cpu_isa(isa) == dnnl::status::success)
      return true;
    // oneDNN refuses once it has jitted a kernel: say so, never silently.
    std::fprintf(stderr,
                 "spanc: warning: oneDNN ran before the instruction-set cap "
                 "'%s'; its GEMMs may use instructions above it\n",
                 isaLevelName(isaLevel()));
    return false;
  }();
  (void)capped;
}

} // namespace

void convertToBf16(const float *source, uint16_t *destination, int64_t count) {
  if (cpuFeatures().avx512bf16) {
    convertToBf16Native(source, destination, count);
    return;
  }
  for (int64_t index = 0; index < count; ++index) {
    uint32_t bits;
    std::memcpy(&bits, source + index, sizeof(bits));
    if ((bits & 0x7fffffff) > 0x7f800000) { // NaN stays a quiet NaN
      destination[index] = uint16_t((bits >> 16) | 0x40);
      continue;
    }
    bits += 0x7fff + ((bits >> 16) & 1);
    destination[index] = uint16_t(bits >> 16);
  }
}

GemmPrecision defaultGemmPrecision() {
  return cpuFeatures().hasNativeBf16() ? GemmPrecision::Bf16
                                       : GemmPrecision::F32;
}

const char *gemmPrecisionName(GemmPrecision precision) {
  return precision == GemmPrecision::Bf16 ? "bf16" : "f32";
}

const char *gemmKernelName(GemmKernel kernel) {
  switch (kernel) {
  case GemmKernel::Amx:
    return "amx";
  case GemmKernel::Avx512Bf16:
    return "avx512bf16";
  case GemmKernel::F32:
    return "f32";
  case GemmKernel::OneDnn:
    break;
  }
  return "onednn";
}

std::optional<GemmKernel> parseGemmKernel(llvm::StringRef name) {
  if (name == "amx")
    return GemmKernel::Amx;
  if (name == "avx512bf16")
    return GemmKernel::Avx512Bf16;
  if (name == "onednn")
    return GemmKernel::OneDnn;
  return std::nullopt;
}

struct GemmWeights::Storage {
  // One of the three: bf16 panels (the AMX and AVX-512 BF16 kernels'),
  // f32 panels (spanc's f32 kernel), or oneDNN's blocked layout.
  AmxWeights amx;
  F32Panels f32;
  dnnl::memory::desc desc;
  dnnl::memory memory;
};

GemmWeights::GemmWeights() = default;
GemmWeights::~GemmWeights() = default;
GemmWeights::GemmWeights(GemmWeights &&) noexcept = default;
GemmWeights &GemmWeights::operator=(GemmWeights &&) noexcept = default;

int64_t GemmWeights::sizeInBytes() const {
  if (!storage)
    return 0;
  if (usesPanels(kernel))
    return storage->amx.sizeInBytes();
  if (kernel == GemmKernel::F32)
    return storage->f32.sizeInBytes();
  return int64_t(storage->desc.get_size());
}

struct GemmEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul primitive;
    dnnl::memory::desc sourceDesc;
    dnnl::memory::desc destinationDesc;
  };
  /// (M, N, K) -> primitive; the precision is the engine's.
  llvm::DenseMap<std::tuple<int64_t, int64_t, int64_t>, Entry> primitives;
  std::vector<uint16_t> activations; ///< bf16 copy of x
  AmxScratch amxScratch;
  std::vector<float> products; ///< oneDNN's P before an epilogue

  dnnl::matmul::primitive_desc describe(const dnnl::memory::desc &weights,
                                        int64_t m, int64_t k, int64_t n,
                                        GemmPrecision precision) {
    dnnl::memory::desc source({m, k}, dataType(precision), Tag::ab);
    dnnl::memory::desc destination({m, n}, DataType::f32, Tag::ab);
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(source, weights, destination), engine);
  }
};

GemmEngine::GemmEngine(GemmPrecision precision, GemmKernel preferred)
    : impl((capOneDnnIsa(), std::make_unique<Impl>())),
      enginePrecision(precision), engineKernel(GemmKernel::OneDnn) {
  if (preferred == GemmKernel::OneDnn)
    return;
  if (precision != GemmPrecision::Bf16) {
    if (isaLevel() < IsaLevel::Avx512)
      engineKernel = GemmKernel::F32;
    return;
  }
  if (preferred == GemmKernel::Amx && amxBf16Usable())
    engineKernel = GemmKernel::Amx;
  else if (cpuFeatures().avx512bf16)
    engineKernel = GemmKernel::Avx512Bf16;
}
GemmEngine::~GemmEngine() = default;

GemmWeights GemmEngine::emptyWeights(int64_t rows, int64_t columns) const {
  GemmWeights weights;
  weights.numRows = rows;
  weights.numColumns = columns;
  weights.weightPrecision = enginePrecision;
  weights.kernel = engineKernel;
  weights.storage = std::make_unique<GemmWeights::Storage>();
  return weights;
}

llvm::Expected<GemmWeights>
GemmEngine::packWeights(const float *matrix, int64_t rows, int64_t columns) {
  GemmWeights weights = emptyWeights(rows, columns);
  if (usesPanels(engineKernel)) {
    weights.storage->amx = packAmxWeights(matrix, rows, columns);
    return weights;
  }
  if (engineKernel == GemmKernel::F32) {
    weights.storage->f32 = packF32Panels(matrix, rows, columns);
    return weights;
  }
  try {
    // W^T as a {K, N} matrix; the source rows of W make it N-major ("ba").
    dnnl::memory::desc any({columns, rows}, dataType(enginePrecision),
                           Tag::any);
    auto primitiveDesc =
        impl->describe(any, kLayoutRows, columns, rows, enginePrecision);
    weights.storage->desc = primitiveDesc.weights_desc();
    weights.storage->memory = dnnl::memory(weights.storage->desc, impl->engine);
    std::vector<uint16_t> bf16;
    dnnl::memory::desc plainDesc({columns, rows}, dataType(enginePrecision),
                                 Tag::ba);
    void *plainData = const_cast<float *>(matrix);
    if (enginePrecision == GemmPrecision::Bf16) {
      bf16.resize(size_t(rows * columns));
      convertToBf16(matrix, bf16.data(), rows * columns);
      plainData = bf16.data();
    }
    dnnl::memory plain(plainDesc, impl->engine, plainData);
    dnnl::reorder(plain, weights.storage->memory)
        .execute(impl->stream, plain, weights.storage->memory);
    impl->stream.wait();
  } catch (const dnnl::error &error) {
    return dnnlError(error, "weight packing");
  }
  return weights;
}

llvm::Expected<GemmWeights> GemmEngine::packGatedWeights(const float *matrix,
                                                         int64_t rows,
                                                         int64_t columns) {
  if (rows % 2 != 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "gated weights need an even number of rows "
                                   "(gate, then up), not %lld",
                                   static_cast<long long>(rows));
  if (usesPanels(engineKernel) && rows % 32 == 0) {
    GemmWeights weights = emptyWeights(rows, columns);
    weights.gated = true;
    weights.storage->amx = packAmxGatedWeights(matrix, rows, columns);
    return weights;
  }
  // oneDNN, or panels of widths the SwiGLU epilogue does not take: a plain
  // pack, the SwiGLU applied after the product.
  auto weights = packWeights(matrix, rows, columns);
  if (weights)
    weights->gated = true;
  return weights;
}

bool GemmEngine::canBorrowQuantized() const {
  if (engineKernel == GemmKernel::F32)
    return canBorrowF32Panels();
  return usesPanels(engineKernel) && cpuFeatures().avx512bf16;
}

GemmWeights GemmEngine::borrowQuantized(const PackedQuantMatrix &matrix,
                                        bool gated) {
  assert(canBorrowQuantized() && "borrowed weights need a panel kernel");
  GemmWeights weights = emptyWeights(matrix.rows, matrix.columns);
  weights.gated = gated;
  if (engineKernel == GemmKernel::F32) { // SwiGLU after the product
    weights.storage->f32 = borrowF32Panels(matrix);
    return weights;
  }
  // The SwiGLU epilogue takes 32-row panels; other widths multiply plain
  // and apply SwiGLU after (multiplyGated).
  weights.storage->amx =
      borrowAmxWeights(matrix, gated && matrix.rows % 32 == 0);
  return weights;
}

llvm::Error GemmEngine::multiply(const GemmWeights &weights, const float *x,
                                 int64_t m, float *y, GemmOutput output) {
  assert(!weights.gated && "gated weights go through multiplyGated");
  if (usesPanels(weights.kernel)) {
    multiplyPanels(weights, x, m, y,
                   output == GemmOutput::Store ? AmxEpilogue::Store
                                               : AmxEpilogue::Accumulate);
    return llvm::Error::success();
  }
  if (weights.kernel == GemmKernel::F32) {
    f32PanelGemm(weights.storage->f32, x, m, y,
                 output == GemmOutput::Accumulate);
    return llvm::Error::success();
  }
  if (output == GemmOutput::Store)
    return multiplyOneDnn(weights, x, m, y);
  const int64_t n = weights.numRows;
  impl->products.resize(size_t(m * n));
  if (llvm::Error error = multiplyOneDnn(weights, x, m, impl->products.data()))
    return error;
  addInPlace(RowShape{m, n, n, n}, y, impl->products.data());
  return llvm::Error::success();
}

llvm::Error GemmEngine::multiplyGated(const GemmWeights &weights,
                                      const float *x, int64_t m, float *h) {
  assert(weights.gated && "multiplyGated needs packGatedWeights' weights");
  const int64_t n = weights.numRows, half = n / 2;
  if (usesPanels(weights.kernel) && weights.storage->amx.gated) {
    multiplyPanels(weights, x, m, h, AmxEpilogue::SwiGlu);
    return llvm::Error::success();
  }
  impl->products.resize(size_t(m * n));
  if (usesPanels(weights.kernel))
    multiplyPanels(weights, x, m, impl->products.data(), AmxEpilogue::Store);
  else if (weights.kernel == GemmKernel::F32)
    f32PanelGemm(weights.storage->f32, x, m, impl->products.data(), false);
  else if (llvm::Error error =
               multiplyOneDnn(weights, x, m, impl->products.data()))
    return error;
  swiGlu(RowShape{m, half, n, half}, impl->products.data(),
         impl->products.data() + half, h);
  return llvm::Error::success();
}

void GemmEngine::multiplyPanels(const GemmWeights &weights, const float *x,
                                int64_t m, float *y, AmxEpilogue epilogue) {
  if (weights.kernel == GemmKernel::Amx)
    amxGemm(weights.storage->amx, x, m, y, impl->amxScratch, epilogue);
  else
    avx512Bf16Gemm(weights.storage->amx, x, m, y, impl->amxScratch, epilogue);
}

llvm::Error GemmEngine::multiplyOneDnn(const GemmWeights &weights,
                                       const float *x, int64_t m, float *y) {
  const int64_t n = weights.numRows, k = weights.numColumns;
  try {
    auto key = std::make_tuple(m, n, k);
    auto found = impl->primitives.find(key);
    if (found == impl->primitives.end()) {
      auto primitiveDesc =
          impl->describe(weights.storage->desc, m, k, n, enginePrecision);
      Impl::Entry entry{dnnl::matmul(primitiveDesc), primitiveDesc.src_desc(),
                        primitiveDesc.dst_desc()};
      found = impl->primitives.try_emplace(key, std::move(entry)).first;
    }
    void *sourceData = const_cast<float *>(x);
    if (enginePrecision == GemmPrecision::Bf16) {
      if (impl->activations.size() < size_t(m * k))
        impl->activations.resize(size_t(m * k));
      convertToBf16(x, impl->activations.data(), m * k);
      sourceData = impl->activations.data();
    }
    dnnl::memory source(found->second.sourceDesc, impl->engine, sourceData);
    dnnl::memory destination(found->second.destinationDesc, impl->engine, y);
    found->second.primitive.execute(
        impl->stream, {{DNNL_ARG_SRC, source},
                       {DNNL_ARG_WEIGHTS, weights.storage->memory},
                       {DNNL_ARG_DST, destination}});
    impl->stream.wait();
  } catch (const dnnl::error &error) {
    return dnnlError(error, "matmul");
  }
  return llvm::Error::success();
}

std::string GemmEngine::implementationName(const GemmWeights &weights,
                                           int64_t m) {
  if (weights.kernel == GemmKernel::Amx)
    return "spanc:amx_bf16";
  if (weights.kernel == GemmKernel::Avx512Bf16)
    return "spanc:avx512_bf16";
  if (weights.kernel == GemmKernel::F32)
    return "spanc:f32";
  try {
    return impl
        ->describe(weights.storage->desc, m, weights.numColumns,
                   weights.numRows, enginePrecision)
        .impl_info_str();
  } catch (const dnnl::error &error) {
    return std::string("error: ") + error.what();
  }
}

} // namespace spanc::cpu
