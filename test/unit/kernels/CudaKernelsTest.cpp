//===- CudaKernelsTest.cpp - Each CUDA kernel against the CPU kernel ------===//
//
// Runs every CUDA kernel on a device and compares it with the CPU kernel
// (or the model loader) on the same inputs. Tolerances, and why:
//   exact: dequantization (products kept unfused), embedding rows, K/V
//     writes, block copies, residual and bias adds, gathers, argmax;
//   1e-6 relative: RoPE (the GPU may fuse a*c - b*s into one FMA);
//   1e-5 relative: RMSNorm and SwiGLU (a different summation order and
//     expf);
//   bf16 outputs: one bf16 rounding (2^-8 relative) on top;
//   GEMM: 1e-3 of sum |x w| (f32 accumulation in another order);
//   attention: 1e-4 absolute (f32 dot products and exps, other order);
//   relocation: one half rounding (FMA vs separate products can move the
//     f32 result by an ulp and the rounded half by one step).
// Without a device every test is skipped with a visible notice, and the
// target passes: CI has the toolkit but no GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/cpu/KvStorage.h"
#include "runtime/backend/cpu/RelocationExecutor.h"
#include "runtime/kernels/cpu/Attention.h"
#include "runtime/kernels/cpu/Elementwise.h"
#include "runtime/kernels/cpu/Half.h"
#include "runtime/kernels/cpu/Rope.h"
#include "runtime/kernels/cuda/AddRows.h"
#include "runtime/kernels/cuda/CopyBlock.h"
#include "runtime/kernels/cuda/Dequantize.h"
#include "runtime/kernels/cuda/Device.h"
#include "runtime/kernels/cuda/Embedding.h"
#include "runtime/kernels/cuda/Gemm.h"
#include "runtime/kernels/cuda/KvDistances.h"
#include "runtime/kernels/cuda/KvWrite.h"
#include "runtime/kernels/cuda/PagedAttention.h"
#include "runtime/kernels/cuda/Relocation.h"
#include "runtime/kernels/cuda/RmsNorm.h"
#include "runtime/kernels/cuda/Rope.h"
#include "runtime/kernels/cuda/Rows.h"
#include "runtime/kernels/cuda/Sampling.h"
#include "runtime/kernels/cuda/SwiGlu.h"
#include "runtime/model/Quantization.h"
#include "runtime/model/Sampler.h"
#include "test/unit/kernels/KvStorageTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace spanc;

#define ASSERT_CUDA_OK(expression)                                             \
  do {                                                                         \
    const cuda::Status status_ = (expression);                                 \
    ASSERT_TRUE(status_.ok()) << status_.message();                            \
  } while (false)

class CudaKernels : public testing::Test {
protected:
  void SetUp() override {
    const cuda::Status probe = cuda::probeDevices();
    if (!probe.ok())
      GTEST_SKIP() << "no CUDA device: " << probe.message();
    ASSERT_CUDA_OK(cuda::setDevice(0));
  }

  /// A device copy of `values`, kept alive by the fixture.
  template <typename T> T *upload(const std::vector<T> &values) {
    buffers.emplace_back();
    cuda::DeviceBuffer &buffer = buffers.back();
    const size_t bytes = values.size() * sizeof(T);
    EXPECT_TRUE(buffer.reserve(bytes == 0 ? 1 : bytes).ok());
    EXPECT_TRUE(
        cuda::copyToDevice(buffer.data(), values.data(), bytes, nullptr).ok());
    return buffer.as<T>();
  }
  /// `count` uninitialized device elements.
  template <typename T> T *deviceArray(size_t count) {
    buffers.emplace_back();
    EXPECT_TRUE(buffers.back().reserve(count * sizeof(T) + 1).ok());
    return buffers.back().as<T>();
  }
  template <typename T> std::vector<T> download(const T *device, size_t count) {
    std::vector<T> values(count);
    EXPECT_TRUE(
        cuda::copyToHost(values.data(), device, count * sizeof(T), nullptr)
            .ok());
    return values;
  }

  /// A device copy of `table` as the kernels read it (its head dim is its
  /// rotary dim).
  cuda::RopeTableView uploadRopeTable(const cpu::RopeTable &table) {
    const cpu::RopeConfig &config = table.config();
    cuda::RopeTableView view;
    view.cosSin = upload(std::vector<float>(
        table.row(0), table.row(0) + table.numPositions() * config.rotaryDim));
    view.numPositions = table.numPositions();
    view.rotaryDim = view.headDim = config.rotaryDim;
    view.order = config.order == cpu::RopeOrder::NeoX ? cuda::RopeOrder::NeoX
                                                      : cuda::RopeOrder::Normal;
    return view;
  }

  std::vector<float> randomFloats(size_t count, float sigma = 1.0f) {
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> values(count);
    for (float &value : values)
      value = normal(rng);
    return values;
  }

  std::mt19937 rng{1234};
  std::vector<cuda::DeviceBuffer> buffers;
};

/// What a KvStorage holds, on the device, as a pool view over it.
struct DevicePool {
  cuda::DeviceBuffer memory;
  cuda::KvPoolView pool;
};

cuda::Status uploadStorage(backend::KvStorage &storage, DevicePool &device) {
  SPANC_CUDA_TRY(device.memory.reserve(size_t(storage.sizeInBytes())));
  SPANC_CUDA_TRY(cuda::copyToDevice(device.memory.data(),
                                    storage.keyData(0, 0, 0),
                                    size_t(storage.sizeInBytes()), nullptr));
  device.pool = backend::poolViewAt(storage, device.memory.data());
  return cuda::Status::success();
}

std::unique_ptr<backend::KvStorage> makeStorage(cpu::KvPrecision precision,
                                                bool keysRotated = true,
                                                int headDim = 64) {
  backend::KvStorageConfig config;
  config.numLayers = 2;
  config.numKvHeads = 2;
  config.headDim = headDim;
  config.blockSize = 16;
  config.numBlocks = 64;
  config.keysRotated = keysRotated;
  config.precision = precision;
  auto storage = backend::KvStorage::create(config);
  return storage ? std::move(*storage) : nullptr;
}

/// makeStorage's storage filled with random K/V, and its copy in `device`;
/// nullptr (and a test failure) when either fails.
std::unique_ptr<backend::KvStorage>
randomStorageOnDevice(DevicePool &device, std::mt19937 &rng,
                      cpu::KvPrecision precision, bool keysRotated = true,
                      int headDim = 64) {
  auto storage = makeStorage(precision, keysRotated, headDim);
  EXPECT_TRUE(storage);
  if (!storage)
    return nullptr;
  backend::fillRandom(*storage, rng);
  const cuda::Status status = uploadStorage(*storage, device);
  EXPECT_TRUE(status.ok()) << status.message();
  return status.ok() ? std::move(storage) : nullptr;
}

std::vector<uint16_t> toBf16(const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t index = 0; index < values.size(); ++index)
    bits[index] = model::floatToBf16(values[index]);
  return bits;
}

TEST_F(CudaKernels, GemmMatchesADoubleReferenceOnBf16Inputs) {
  std::unique_ptr<cuda::GemmEngine> engine;
  ASSERT_CUDA_OK(cuda::GemmEngine::create(engine));
  const int64_t m = 37, n = 96, k = 576;
  const std::vector<uint16_t> x = toBf16(randomFloats(size_t(m * k)));
  const std::vector<uint16_t> w = toBf16(randomFloats(size_t(n * k), 0.05f));
  const std::vector<float> initial = randomFloats(size_t(m * n));
  std::vector<double> reference(size_t(m * n)), bound(size_t(m * n));
  for (int64_t row = 0; row < m; ++row)
    for (int64_t col = 0; col < n; ++col)
      for (int64_t depth = 0; depth < k; ++depth) {
        const double product =
            double(model::bf16ToFloat(x[size_t(row * k + depth)])) *
            model::bf16ToFloat(w[size_t(col * k + depth)]);
        reference[size_t(row * n + col)] += product;
        bound[size_t(row * n + col)] += std::fabs(product);
      }
  cuda::GemmProblem problem;
  problem.rows = m;
  problem.columns = n;
  problem.depth = k;
  problem.x = upload(x);
  problem.xStride = k;
  problem.w = upload(w);
  problem.wStride = k;
  float *y = upload(initial);
  problem.y = y;
  problem.yStride = n;
  problem.outputType = cuda::GemmOutputType::F32;
  problem.accumulate = true;
  ASSERT_CUDA_OK(engine->multiply(problem, nullptr));
  const std::vector<float> accumulated = download(y, size_t(m * n));
  uint16_t *yBf16 = deviceArray<uint16_t>(size_t(m * n));
  problem.y = yBf16;
  problem.outputType = cuda::GemmOutputType::Bf16;
  problem.accumulate = false;
  ASSERT_CUDA_OK(engine->multiply(problem, nullptr));
  const std::vector<uint16_t> rounded = download(yBf16, size_t(m * n));
  for (size_t index = 0; index < reference.size(); ++index) {
    ASSERT_NEAR(accumulated[index], reference[index] + initial[index],
                1e-3 * bound[index] + 1e-6)
        << index;
    ASSERT_NEAR(model::bf16ToFloat(rounded[index]), reference[index],
                1e-3 * bound[index] + std::fabs(reference[index]) / 128)
        << index;
  }
  problem.rows = 0;
  EXPECT_FALSE(engine->multiply(problem, nullptr).ok());
}

TEST_F(CudaKernels, RowInvariantGemmRowsDoNotDependOnTheRowCount) {
  cuda::GemmOptions options;
  options.rowInvariant = true;
  std::unique_ptr<cuda::GemmEngine> engine;
  ASSERT_CUDA_OK(cuda::GemmEngine::create(engine, options));
  const int64_t n = 1536, k = 576, rows = 300;
  const std::vector<uint16_t> x = toBf16(randomFloats(size_t(rows * k)));
  const uint16_t *deviceX = upload(x);
  const uint16_t *deviceW = upload(toBf16(randomFloats(size_t(n * k), 0.05f)));
  // Rows [first, first + count) alone must give their bits in all 300.
  auto product = [&](int64_t first, int64_t count) {
    cuda::GemmProblem problem;
    problem.rows = count;
    problem.columns = n;
    problem.depth = k;
    problem.x = deviceX + first * k;
    problem.xStride = k;
    problem.w = deviceW;
    problem.wStride = k;
    float *y = deviceArray<float>(size_t(count * n));
    problem.y = y;
    problem.yStride = n;
    EXPECT_TRUE(engine->multiply(problem, nullptr).ok());
    return download(y, size_t(count * n));
  };
  // Offsets keep X's alignment (the algorithm depends on it).
  const std::vector<float> all = product(0, rows);
  for (auto [first, count] :
       {std::pair<int64_t, int64_t>{256, 1}, {128, 37}, {0, 200}, {64, 236}}) {
    const std::vector<float> part = product(first, count);
    EXPECT_EQ(std::memcmp(part.data(), all.data() + first * n,
                          part.size() * sizeof(float)),
              0)
        << count << " rows from " << first;
  }
}

TEST_F(CudaKernels, DequantizationEqualsTheLoaderBitForBit) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (model::GgmlType type :
       {model::GgmlType::Q4_0, model::GgmlType::Q4_1, model::GgmlType::Q8_0,
        model::GgmlType::Q4_K, model::GgmlType::Q6_K, model::GgmlType::F16,
        model::GgmlType::BF16, model::GgmlType::F32}) {
    SCOPED_TRACE(model::ggmlTypeName(type));
    const int64_t count = 2048;
    const model::GgmlTypeTraits traits = model::ggmlTypeTraits(type);
    std::vector<uint8_t> bytes(size_t(count / traits.blockSize) *
                               traits.blockBytes);
    for (uint8_t &value : bytes)
      value = uint8_t(byte(rng));
    // Finite scales and values: rewrite every 16-bit word that encodes a
    // half/bf16 NaN or inf (the formats' scales are f16 words).
    if (type != model::GgmlType::F32)
      for (size_t index = 0; index + 1 < bytes.size(); index += 2)
        bytes[index + 1] &= 0x3f;
    else
      for (size_t index = 3; index < bytes.size(); index += 4)
        bytes[index] &= 0x3f;
    std::vector<uint16_t> expectedBf16(static_cast<size_t>(count));
    std::vector<float> expectedF32(static_cast<size_t>(count));
    model::convertRowToBf16(type, bytes.data(), expectedBf16.data(), count);
    model::dequantizeRow(type, bytes.data(), expectedF32.data(), count);
    const uint8_t *source = upload(bytes);
    uint16_t *bf16 = deviceArray<uint16_t>(size_t(count));
    float *f32 = deviceArray<float>(size_t(count));
    const cuda::QuantType quant = cuda::QuantType(uint32_t(type));
    ASSERT_TRUE(cuda::canDequantizeOnDevice(uint32_t(type)));
    ASSERT_CUDA_OK(cuda::dequantizeToBf16(quant, source, count, bf16, nullptr));
    ASSERT_CUDA_OK(cuda::dequantizeToF32(quant, source, count, f32, nullptr));
    EXPECT_EQ(download(bf16, size_t(count)), expectedBf16);
    const std::vector<float> actual = download(f32, size_t(count));
    EXPECT_EQ(std::memcmp(actual.data(), expectedF32.data(),
                          actual.size() * sizeof(float)),
              0);
  }
  EXPECT_FALSE(cuda::canDequantizeOnDevice(uint32_t(model::GgmlType::Q5_K)));
}

TEST_F(CudaKernels, RowKernelsMatchTheCpu) {
  const int64_t rows = 5, cols = 576, ffn = 1536;
  const std::vector<float> x = randomFloats(size_t(rows * cols));
  const std::vector<float> weight = randomFloats(size_t(cols));
  const cpu::RowShape cpuShape{rows, cols, cols, cols};
  const cuda::RowShape shape{rows, cols, cols, cols};
  std::vector<float> expected(x.size());
  cpu::rmsNorm(cpuShape, x.data(), weight.data(), 1e-5f, expected.data());
  const float *deviceX = upload(x);
  const float *deviceWeight = upload(weight);
  float *out = deviceArray<float>(x.size());
  uint16_t *outBf16 = deviceArray<uint16_t>(x.size());
  ASSERT_CUDA_OK(
      cuda::rmsNorm(shape, deviceX, deviceWeight, 1e-5f, out, nullptr));
  ASSERT_CUDA_OK(
      cuda::rmsNorm(shape, deviceX, deviceWeight, 1e-5f, outBf16, nullptr));
  const std::vector<float> normed = download(out, x.size());
  const std::vector<uint16_t> normedBf16 = download(outBf16, x.size());
  for (size_t index = 0; index < x.size(); ++index) {
    ASSERT_NEAR(normed[index], expected[index],
                1e-5f * (1 + std::fabs(expected[index])));
    ASSERT_NEAR(model::bf16ToFloat(normedBf16[index]), expected[index],
                std::fabs(expected[index]) / 128 + 1e-5f);
  }

  // SwiGLU over the halves of a gate|up row.
  const std::vector<float> gateUp = randomFloats(size_t(rows * 2 * ffn), 3.0f);
  std::vector<float> activated(size_t(rows * ffn));
  cpu::swiGlu(cpu::RowShape{rows, ffn, 2 * ffn, ffn}, gateUp.data(),
              gateUp.data() + ffn, activated.data());
  const float *deviceGateUp = upload(gateUp);
  float *deviceActivated = deviceArray<float>(activated.size());
  ASSERT_CUDA_OK(cuda::swiGlu(cuda::RowShape{rows, ffn, 2 * ffn, ffn},
                              deviceGateUp, deviceGateUp + ffn, deviceActivated,
                              nullptr));
  const std::vector<float> gpuActivated =
      download(deviceActivated, activated.size());
  for (size_t index = 0; index < activated.size(); ++index)
    ASSERT_NEAR(gpuActivated[index], activated[index],
                1e-5f * (1 + std::fabs(activated[index])));

  // Residual add, bias add, gather, bf16 conversion: exact.
  const std::vector<float> y = randomFloats(x.size());
  float *deviceSum = upload(x);
  ASSERT_CUDA_OK(cuda::addInPlace(shape, deviceSum, upload(y), nullptr));
  ASSERT_CUDA_OK(cuda::addBias(shape, deviceSum, deviceWeight, nullptr));
  const std::vector<float> sum = download(deviceSum, x.size());
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < cols; ++col) {
      const size_t index = size_t(row * cols + col);
      ASSERT_EQ(sum[index], (x[index] + y[index]) + weight[size_t(col)]);
    }
  const std::vector<int32_t> pick = {4, 0, 4};
  float *gathered = deviceArray<float>(3 * size_t(cols));
  ASSERT_CUDA_OK(cuda::gatherRows(cuda::RowShape{3, cols, cols, cols}, deviceX,
                                  upload(pick), gathered, nullptr));
  const std::vector<float> rowsOut = download(gathered, 3 * size_t(cols));
  for (size_t row = 0; row < 3; ++row)
    EXPECT_EQ(std::memcmp(rowsOut.data() + row * size_t(cols),
                          x.data() + size_t(pick[row]) * size_t(cols),
                          size_t(cols) * sizeof(float)),
              0);
  uint16_t *converted = deviceArray<uint16_t>(x.size());
  ASSERT_CUDA_OK(cuda::convertToBf16(shape, deviceX, converted, nullptr));
  EXPECT_EQ(download(converted, x.size()), toBf16(x));
}

TEST_F(CudaKernels, EmbeddingLookupCopiesTableRows) {
  const int64_t vocab = 100, dim = 64;
  const std::vector<uint16_t> table = toBf16(randomFloats(size_t(vocab * dim)));
  const std::vector<int32_t> ids = {7, 99, 0, 7};
  float *out = deviceArray<float>(ids.size() * size_t(dim));
  cuda::EmbeddingTable view;
  view.bf16Rows = upload(table);
  view.numRows = vocab;
  view.dim = dim;
  view.rowStride = dim;
  ASSERT_CUDA_OK(cuda::embeddingLookup(view, upload(ids), int64_t(ids.size()),
                                       out, dim, nullptr));
  const std::vector<float> rows = download(out, ids.size() * size_t(dim));
  for (size_t token = 0; token < ids.size(); ++token)
    for (int64_t col = 0; col < dim; ++col)
      ASSERT_EQ(rows[token * size_t(dim) + size_t(col)],
                model::bf16ToFloat(table[size_t(ids[token] * dim + col)]));
}

TEST_F(CudaKernels, RopeMatchesTheCpuInBothOrders) {
  for (cpu::RopeOrder order : {cpu::RopeOrder::Normal, cpu::RopeOrder::NeoX}) {
    cpu::RopeConfig config;
    config.headDim = 64;
    config.rotaryDim = 64;
    config.order = order;
    cpu::RopeTable table(config, 4096);
    const int64_t rows = 9, heads = 11, stride = heads * 64 + 8;
    std::vector<float> x = randomFloats(size_t(rows * stride));
    std::vector<int32_t> positions = {0, 1, 2, 100, 4095, 17, 5, 6, 3000};
    float *deviceX = upload(x);
    const cuda::RopeTableView view = uploadRopeTable(table);
    ASSERT_CUDA_OK(cuda::applyRope(cuda::RopeShape{rows, heads, stride}, view,
                                   upload(positions), deviceX, nullptr));
    cpu::applyRope(cpu::RopeShape{rows, heads, stride}, table, positions.data(),
                   x.data());
    const std::vector<float> actual = download(deviceX, x.size());
    for (size_t index = 0; index < x.size(); ++index)
      ASSERT_NEAR(actual[index], x[index], 1e-6f * (1 + std::fabs(x[index])))
          << index;
  }
}

TEST_F(CudaKernels, KvWriteStoresWhatWriteTokensStores) {
  for (cpu::KvPrecision precision :
       {cpu::KvPrecision::F16, cpu::KvPrecision::F32}) {
    auto storage = makeStorage(precision);
    ASSERT_TRUE(storage);
    DevicePool device;
    ASSERT_CUDA_OK(uploadStorage(*storage, device));
    const int64_t rowStride = 3 * 128;
    const std::vector<int32_t> blocks = {3, 3, 3, 9, 63};
    const std::vector<int32_t> slots = {0, 1, 2, 15, 7};
    const std::vector<float> rows =
        randomFloats(blocks.size() * size_t(rowStride), 2.0f);
    storage->writeTokens(1, int64_t(blocks.size()), blocks.data(), slots.data(),
                         rows.data() + 128, rows.data() + 256, rowStride);
    const float *deviceRows = upload(rows);
    ASSERT_CUDA_OK(cuda::writeKv(
        device.pool, 1, int64_t(blocks.size()), upload(blocks), upload(slots),
        deviceRows + 128, deviceRows + 256, rowStride, nullptr));
    const std::vector<char> actual =
        download(device.memory.as<char>(), size_t(storage->sizeInBytes()));
    EXPECT_EQ(
        std::memcmp(actual.data(), storage->keyData(0, 0, 0), actual.size()),
        0);
  }
}

TEST_F(CudaKernels, CopyBlockCopiesEveryLayer) {
  DevicePool device;
  auto storage = randomStorageOnDevice(device, rng, cpu::KvPrecision::F16);
  ASSERT_TRUE(storage);
  ASSERT_CUDA_OK(cuda::copyBlock(device.pool, 5, 40, nullptr));
  storage->copyBlock(5, 40);
  const std::vector<char> actual =
      download(device.memory.as<char>(), size_t(storage->sizeInBytes()));
  EXPECT_EQ(
      std::memcmp(actual.data(), storage->keyData(0, 0, 0), actual.size()), 0);
  EXPECT_FALSE(cuda::copyBlock(device.pool, 5, 64, nullptr).ok());
}

TEST_F(CudaKernels, TokenDistancesMatchTheStorages) {
  DevicePool device;
  auto storage = randomStorageOnDevice(device, rng, cpu::KvPrecision::F16);
  ASSERT_TRUE(storage);
  const std::vector<int32_t> a = {3, 8, 8}, b = {4, 8, 60};
  float *out = deviceArray<float>(a.size() * 16);
  ASSERT_CUDA_OK(cuda::tokenDistances(device.pool, 1, upload(a), upload(b),
                                      int64_t(a.size()), out, nullptr));
  const std::vector<float> actual = download(out, a.size() * 16);
  std::vector<float> expected(16);
  for (size_t pair = 0; pair < a.size(); ++pair) {
    storage->tokenDistances(1, a[pair], b[pair], 16, expected.data());
    for (size_t slot = 0; slot < 16; ++slot)
      ASSERT_NEAR(actual[pair * 16 + slot], expected[slot],
                  1e-6f * expected[slot]);
  }
  EXPECT_EQ(actual[16], 0.0f); // a block against itself
}

struct AttentionCase {
  cpu::KvPrecision precision;
  bool ropeInKernel;
  cuda::AttentionKernel kernel = cuda::AttentionKernel::Auto;
  int headDim = 64;
};

cpu::RopeConfig ropeConfigOf(int headDim) {
  cpu::RopeConfig config;
  config.headDim = config.rotaryDim = headDim;
  return config;
}

/// Whether a case runs on the tensor cores (f16 products; the SIMT kernel
/// and f32 K/V compute every product in f32).
bool onTensorCores(const AttentionCase &param) {
  return param.kernel == cuda::AttentionKernel::Auto &&
         param.precision == cpu::KvPrecision::F16;
}

/// Attention over a storage of random K/V (K rotated unless the case
/// rotates keys in the kernel) and its device copy.
class CudaAttention : public CudaKernels,
                      public testing::WithParamInterface<AttentionCase> {
protected:
  void SetUp() override {
    CudaKernels::SetUp();
    if (IsSkipped() || HasFatalFailure())
      return;
    storage =
        randomStorageOnDevice(device, rng, GetParam().precision,
                              !GetParam().ropeInKernel, GetParam().headDim);
    ASSERT_TRUE(storage);
    ropeTable = std::make_unique<cpu::RopeTable>(
        ropeConfigOf(GetParam().headDim), 2048);
  }

  /// What keys rotate by under rope-in-kernel.
  std::unique_ptr<cpu::RopeTable> ropeTable;
  DevicePool device;
  std::unique_ptr<backend::KvStorage> storage;
};

TEST_P(CudaAttention, MatchesTheCpuKernel) {
  const AttentionCase param = GetParam();

  // Decode (short; long enough to split), a prefill with padding and a
  // scattered span-like page list.
  std::vector<int32_t> queryOffsets = {0, 1, 2, 39, 45};
  std::vector<int32_t> pageOffsets = {0, 2, 42, 46, 50};
  std::vector<int32_t> blockIds, validTokens;
  for (int page = 0; page < 2; ++page) {
    blockIds.push_back(20 + page);
    validTokens.push_back(page == 1 ? 1 : 16);
  }
  for (int page = 0; page < 40; ++page) {
    blockIds.push_back((page * 7) % 64);
    validTokens.push_back(page == 39 ? 13 : 16);
  }
  for (int page = 0; page < 4; ++page) {
    blockIds.push_back(page);
    validTokens.push_back(page == 1 ? 9 : page == 3 ? 11 : 16);
  }
  blockIds.insert(blockIds.end(), {50, 7, 33, 12});
  validTokens.insert(validTokens.end(), {16, 3, 16, 6});
  const int queryHeads = 6, headDim = param.headDim;
  const int64_t width = (queryHeads + 4) * headDim; // Q|K|V rows
  const std::vector<float> queries = randomFloats(45 * size_t(width));

  cpu::PagedAttentionShape cpuShape;
  cpuShape.numQueryHeads = queryHeads;
  cpuShape.numKvHeads = 2;
  cpuShape.headDim = headDim;
  cpuShape.scale = 1.0f / std::sqrt(float(headDim));
  cpuShape.queryRowStride = width;
  cpuShape.outputRowStride = queryHeads * headDim;
  cpu::PagedAttentionBatch cpuBatch;
  cpuBatch.numSequences = 4;
  cpuBatch.queryOffsets = queryOffsets.data();
  cpuBatch.pageOffsets = pageOffsets.data();
  cpuBatch.blockIds = blockIds.data();
  cpuBatch.validTokens = validTokens.data();
  cpu::PagedAttentionOptions cpuOptions;
  cpuOptions.forceScalar = true;
  cpuOptions.allowAmx = false;
  cpuOptions.keyRope = param.ropeInKernel ? ropeTable.get() : nullptr;
  cpu::AttentionWorkspace cpuWorkspace;
  std::vector<float> expected(45 * size_t(cpuShape.outputRowStride));
  cpu::pagedAttention(cpuShape, cpuBatch, storage->layerView(1), queries.data(),
                      expected.data(), cpuOptions, cpuWorkspace);

  cuda::PagedAttentionShape shape;
  shape.numQueryHeads = queryHeads;
  shape.numKvHeads = 2;
  shape.headDim = headDim;
  shape.scale = cpuShape.scale;
  shape.queryRowStride = width;
  shape.outputRowStride = cpuShape.outputRowStride;
  cuda::PagedAttentionBatch batch;
  batch.numSequences = 4;
  batch.queryOffsets = queryOffsets.data();
  batch.pageOffsets = pageOffsets.data();
  batch.blockIds = blockIds.data();
  batch.validTokens = validTokens.data();
  cuda::AttentionWorkspace workspace;
  ASSERT_CUDA_OK(workspace.prepare(shape, batch, 16, {}, nullptr));
  ASSERT_FALSE(workspace.plan().merges.empty());
  const cuda::RopeTableView ropeView = uploadRopeTable(*ropeTable);
  cuda::PagedAttentionOptions options;
  options.keyRope = param.ropeInKernel ? &ropeView : nullptr;
  options.kernel = param.kernel;
  float *output = deviceArray<float>(expected.size());
  uint16_t *outputBf16 = deviceArray<uint16_t>(expected.size());
  const cuda::PagedKvView view = cuda::layerView(device.pool, 1);
  const float *deviceQueries = upload(queries);
  ASSERT_CUDA_OK(cuda::pagedAttention(shape, workspace, view, deviceQueries,
                                      output, options, nullptr));
  ASSERT_CUDA_OK(cuda::pagedAttention(shape, workspace, view, deviceQueries,
                                      outputBf16, options, nullptr));
  ASSERT_CUDA_OK(cuda::synchronize(nullptr));
  const std::vector<float> actual = download(output, expected.size());
  const std::vector<uint16_t> actualBf16 =
      download(outputBf16, expected.size());
  // f32 products: 1e-4. Tensor cores round the scaled queries, the
  // (turned) keys and the softmax weights to f16 (2^-11 relative each):
  // outputs of unit-variance V move by a few 1e-4; 3e-3 bounds that and
  // still catches a wrong key, mask or weight (errors of order 1).
  const float allowed = onTensorCores(param) ? 3e-3f : 1e-4f;
  double worst = 0;
  for (size_t index = 0; index < expected.size(); ++index) {
    worst = std::max(worst, double(std::fabs(actual[index] - expected[index])));
    ASSERT_NEAR(actual[index], expected[index], allowed)
        << "row " << index / size_t(shape.outputRowStride);
    ASSERT_NEAR(model::bf16ToFloat(actualBf16[index]), expected[index],
                allowed + std::fabs(expected[index]) / 128);
  }
  std::printf("[ cuda ] attention (%s kernel, head dim %d) vs the CPU: max "
              "|diff| %.3g\n",
              onTensorCores(param) ? "tensor-core" : "SIMT", headDim, worst);
}

TEST_P(CudaAttention, RowsGiveTheSameBitsSplitOrWhole) {
  const AttentionCase param = GetParam();
  const cuda::RopeTableView ropeView = uploadRopeTable(*ropeTable);
  cuda::PagedAttentionOptions options;
  options.keyRope = param.ropeInKernel ? &ropeView : nullptr;
  options.kernel = param.kernel;
  const int headDim = param.headDim;

  // A 40-page prompt (5 ranges) in full, and its last 3 tokens alone.
  std::vector<int32_t> blockIds, validTokens;
  for (int page = 0; page < 40; ++page) {
    blockIds.push_back((page * 5 + 3) % 64);
    validTokens.push_back(page == 17 ? 4 : 16);
  }
  const int32_t length = 39 * 16 + 4;
  const int64_t width = 6 * headDim;
  const std::vector<float> queries = randomFloats(size_t(length * width));
  cuda::PagedAttentionShape shape;
  shape.numQueryHeads = 6;
  shape.numKvHeads = 2;
  shape.headDim = headDim;
  shape.scale = 1.0f / std::sqrt(float(headDim));
  shape.queryRowStride = width;
  shape.outputRowStride = width;
  const float *deviceQueries = upload(queries);
  auto run = [&](int32_t numQueries, cuda::AttentionSplitting splitting) {
    std::vector<int32_t> queryOffsets = {0, numQueries}, pageOffsets = {0, 40};
    cuda::PagedAttentionBatch batch;
    batch.numSequences = 1;
    batch.queryOffsets = queryOffsets.data();
    batch.pageOffsets = pageOffsets.data();
    batch.blockIds = blockIds.data();
    batch.validTokens = validTokens.data();
    cuda::AttentionPlanOptions planOptions;
    planOptions.splitting = splitting;
    cuda::AttentionWorkspace workspace;
    EXPECT_TRUE(workspace.prepare(shape, batch, 16, planOptions, nullptr).ok());
    float *output = deviceArray<float>(size_t(numQueries * width));
    EXPECT_TRUE(
        cuda::pagedAttention(shape, workspace, cuda::layerView(device.pool, 1),
                             deviceQueries + (length - numQueries) * width,
                             output, options, nullptr)
            .ok());
    return download(output, size_t(numQueries * width));
  };
  const std::vector<float> whole = run(length, cuda::AttentionSplitting::Never);
  const std::vector<float> split =
      run(length, cuda::AttentionSplitting::Always);
  const std::vector<float> tail = run(3, cuda::AttentionSplitting::Auto);
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0);
  EXPECT_EQ(std::memcmp(tail.data(), whole.data() + (length - 3) * width,
                        tail.size() * 4),
            0);
}

INSTANTIATE_TEST_SUITE_P(
    KvLayouts, CudaAttention,
    testing::Values(AttentionCase{cpu::KvPrecision::F16, false},
                    AttentionCase{cpu::KvPrecision::F32, false},
                    AttentionCase{cpu::KvPrecision::F16, true},
                    AttentionCase{cpu::KvPrecision::F16, false,
                                  cuda::AttentionKernel::Simt},
                    AttentionCase{cpu::KvPrecision::F16, true,
                                  cuda::AttentionKernel::Simt},
                    AttentionCase{cpu::KvPrecision::F16, false,
                                  cuda::AttentionKernel::Auto, 128},
                    AttentionCase{cpu::KvPrecision::F16, true,
                                  cuda::AttentionKernel::Auto, 128},
                    AttentionCase{cpu::KvPrecision::F16, true,
                                  cuda::AttentionKernel::Auto, 32}));

TEST_F(CudaKernels, RelocationTurnsBlocksAsTheCpuExecutor) {
  for (cpu::RopeOrder order : {cpu::RopeOrder::Normal, cpu::RopeOrder::NeoX}) {
    DevicePool device;
    auto storage = randomStorageOnDevice(device, rng, cpu::KvPrecision::F16);
    ASSERT_TRUE(storage);
    cpu::RopeConfig rope;
    rope.headDim = rope.rotaryDim = 64;
    rope.order = order;
    const std::vector<kv::RelocationOp> cpuOps = {
        {2, 2, 37}, {4, 10, 37}, {5, 11, -300}, {6, 12, 0}, {7, 7, 100000}};
    backend::RelocationExecutor executor(*storage, rope);
    const std::vector<double> frequencies =
        backend::relocationFrequencies(rope);
    cuda::RelocationRotation rotation;
    rotation.order = order == cpu::RopeOrder::NeoX ? cuda::RopeOrder::NeoX
                                                   : cuda::RopeOrder::Normal;
    rotation.rotaryDim = 64;
    rotation.frequencies = frequencies.data();
    std::vector<cuda::RelocationOp> ops;
    for (const kv::RelocationOp &op : cpuOps)
      ops.push_back({op.source, op.destination, op.delta});
    cuda::RelocationWorkspace workspace;
    ASSERT_CUDA_OK(cuda::relocateBlocks(device.pool, rotation, ops.data(),
                                        ops.size(), workspace, nullptr));
    executor.apply(cpuOps);
    const std::vector<uint16_t> actual =
        download(device.memory.as<uint16_t>(),
                 size_t(storage->sizeInBytes()) / sizeof(uint16_t));
    const uint16_t *expected =
        static_cast<const uint16_t *>(storage->keyData(0, 0, 0));
    for (size_t index = 0; index < actual.size(); ++index) {
      const float a = cpu::halfToFloat(actual[index]);
      const float b = cpu::halfToFloat(expected[index]);
      ASSERT_NEAR(a, b, std::fabs(b) / 1024 + 1e-7f) << index;
    }
  }
}

TEST_F(CudaKernels, GreedyTokensAreTheSamplersArgmax) {
  const int64_t rows = 4, vocab = 49152, stride = vocab + 3;
  std::vector<float> logits = randomFloats(size_t(rows * stride));
  logits[size_t(1 * stride + 500)] = 100.0f; // a tie: the lower id wins
  logits[size_t(1 * stride + 40000)] = 100.0f;
  logits[size_t(2 * stride + 7)] = NAN;
  const float *device = upload(logits);
  cuda::DeviceBuffer scratch;
  std::vector<int32_t> tokens(static_cast<size_t>(rows));
  ASSERT_CUDA_OK(cuda::greedyTokens(device, rows, vocab, stride, scratch,
                                    tokens.data(), nullptr));
  std::vector<float> copied(size_t(rows * vocab));
  ASSERT_CUDA_OK(cuda::copyLogitsToHost(device, rows, vocab, stride,
                                        copied.data(), nullptr));
  for (int64_t row = 0; row < rows; ++row) {
    const llvm::ArrayRef<float> rowLogits(logits.data() + row * stride,
                                          size_t(vocab));
    EXPECT_EQ(tokens[size_t(row)], model::Sampler::argmax(rowLogits)) << row;
    EXPECT_EQ(std::memcmp(copied.data() + row * vocab, rowLogits.data(),
                          size_t(vocab) * sizeof(float)),
              0);
  }
  EXPECT_EQ(tokens[1], 500);
}

} // namespace
