//===- Dequantize.cu - GGUF blocks to bf16 (or f32) on the device ---------===//

#include "runtime/kernels/cuda/Dequantize.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"
#include "runtime/kernels/cuda/DequantizeMath.h"
#include "runtime/kernels/cuda/Launch.h"

namespace spanc::cuda {
namespace {

// One thread per element: the launch is memory bound and runs once per
// tensor at load, so each thread decoding its own element's scales is
// simpler than sharing them and costs nothing that matters.
template <typename Output>
__global__ void dequantizeKernel(QuantType type, const uint8_t *source,
                                 int64_t count, int blockElements,
                                 int blockBytes, Output *destination) {
  for (int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       index < count; index += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t *block = source + index / blockElements * blockBytes;
    const int inBlock = int(index % blockElements);
    float value = 0.0f;
    switch (type) {
    case QuantType::F32:
      value = bitsToFloat(uint32_t(loadLittle16(block)) |
                          (uint32_t(loadLittle16(block + 2)) << 16));
      break;
    case QuantType::F16:
      value = halfToFloat(loadLittle16(block));
      break;
    case QuantType::BF16:
      value = bf16ToFloat(loadLittle16(block));
      break;
    case QuantType::Q4_0:
      value = dequantizeQ4_0Element(block, inBlock);
      break;
    case QuantType::Q4_1:
      value = dequantizeQ4_1Element(block, inBlock);
      break;
    case QuantType::Q8_0:
      value = dequantizeQ8_0Element(block, inBlock);
      break;
    case QuantType::Q4_K:
      value = dequantizeQ4_KElement(block, inBlock);
      break;
    case QuantType::Q6_K:
      value = dequantizeQ6_KElement(block, inBlock);
      break;
    }
    storeActivation(destination + index, value);
  }
}

template <typename Output>
Status launchDequantize(QuantType type, const void *source, int64_t count,
                        Output *destination, Stream stream) {
  const int blockElements = quantBlockElements(type);
  if (blockElements == 0)
    return invalidArgument("dequantize",
                           "ggml type " + std::to_string(uint32_t(type)) +
                               " is not dequantized on the device");
  if (count < 0 || count % blockElements != 0)
    return invalidArgument("dequantize",
                           std::to_string(count) +
                               " elements are not a whole number of blocks "
                               "of " +
                               std::to_string(blockElements));
  const LaunchShape launch = elementwiseLaunch(count);
  if (launch.blocks == 0)
    return Status::success();
  dequantizeKernel<<<unsigned(launch.blocks), launch.threads, 0, stream>>>(
      type, static_cast<const uint8_t *>(source), count, blockElements,
      quantBlockBytes(type), destination);
  return launchStatus("dequantizeKernel");
}

} // namespace

bool canDequantizeOnDevice(uint32_t typeId) {
  return quantBlockElements(QuantType(typeId)) != 0;
}

int quantBlockElements(QuantType type) {
  switch (type) {
  case QuantType::F32:
  case QuantType::F16:
  case QuantType::BF16:
    return 1;
  case QuantType::Q4_0:
  case QuantType::Q4_1:
  case QuantType::Q8_0:
    return 32;
  case QuantType::Q4_K:
  case QuantType::Q6_K:
    return 256;
  }
  return 0;
}

int quantBlockBytes(QuantType type) {
  switch (type) {
  case QuantType::F32:
    return 4;
  case QuantType::F16:
  case QuantType::BF16:
    return 2;
  case QuantType::Q4_0:
    return 18;
  case QuantType::Q4_1:
    return 20;
  case QuantType::Q8_0:
    return 34;
  case QuantType::Q4_K:
    return 144;
  case QuantType::Q6_K:
    return 210;
  }
  return 0;
}

Status dequantizeToBf16(QuantType type, const void *source, int64_t count,
                        uint16_t *destination, Stream stream) {
  return launchDequantize(type, source, count, destination, stream);
}

Status dequantizeToF32(QuantType type, const void *source, int64_t count,
                       float *destination, Stream stream) {
  return launchDequantize(type, source, count, destination, stream);
}

} // namespace spanc::cuda
