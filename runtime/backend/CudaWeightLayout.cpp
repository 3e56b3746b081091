//===- CudaWeightLayout.cpp - Where each weight lives in the device arena -===//

#include "runtime/backend/CudaWeightLayout.h"

#include "runtime/model/Quantization.h"

#include <algorithm>

namespace spanc::backend {

namespace {

using model::GgufFile;
using model::GgufTensor;

class Planner {
public:
  Planner(const GgufFile &file,
          llvm::function_ref<bool(model::GgmlType)> deviceReads,
          CudaWeightLayout &layout)
      : file(file), deviceReads(deviceReads), layout(layout) {}

  uint64_t allocate(uint64_t bytes) {
    const uint64_t alignment = CudaWeightLayout::kAlignment;
    uint64_t offset =
        (layout.arenaBytes + alignment - 1) / alignment * alignment;
    layout.arenaBytes = offset + bytes;
    return offset;
  }

  /// A matrix of the stacked tensors `names` ([columns, rows_i] each).
  llvm::Expected<DeviceMatrix> matrix(llvm::ArrayRef<std::string> names,
                                      llvm::ArrayRef<uint64_t> rows,
                                      uint64_t columns) {
    DeviceMatrix result;
    result.columns = columns;
    for (uint64_t count : rows)
      result.rows += count;
    result.offset = allocate(result.bytes());
    uint64_t firstRow = 0;
    for (size_t index = 0; index < names.size(); ++index) {
      auto tensor = file.getTensorOfShape(names[index], columns, rows[index]);
      if (!tensor)
        return tensor.takeError();
      TensorConversion conversion;
      conversion.tensor = *tensor;
      conversion.isMatrix = true;
      conversion.matrix = result;
      conversion.firstRow = firstRow;
      if (llvm::Error error = choose(conversion, rows[index] * columns * 2))
        return error;
      layout.conversions.push_back(conversion);
      firstRow += rows[index];
    }
    return result;
  }

  llvm::Expected<DeviceVector> vector(const std::string &name, uint64_t size) {
    auto tensor = file.getTensorOfShape(name, size, 0);
    if (!tensor)
      return tensor.takeError();
    DeviceVector result;
    result.size = size;
    result.offset = allocate(size * 4);
    TensorConversion conversion;
    conversion.tensor = *tensor;
    conversion.isMatrix = false;
    conversion.vector = result;
    // Vectors are small: always converted on the host, to f32.
    if (llvm::Error error =
            model::checkDequantizable((*tensor)->type, int64_t(size)))
      return file.tensorError(name, llvm::toString(std::move(error)));
    layout.hostConversionBytes = std::max(layout.hostConversionBytes, size * 4);
    layout.conversions.push_back(conversion);
    return result;
  }

  /// Biases of Q, K and V stacked into one vector.
  llvm::Expected<DeviceVector> stackedVector(llvm::ArrayRef<std::string> names,
                                             llvm::ArrayRef<uint64_t> sizes) {
    DeviceVector result;
    for (uint64_t size : sizes)
      result.size += size;
    result.offset = allocate(result.size * 4);
    uint64_t first = 0;
    for (size_t index = 0; index < names.size(); ++index) {
      auto tensor = file.getTensorOfShape(names[index], sizes[index], 0);
      if (!tensor)
        return tensor.takeError();
      if (llvm::Error error =
              model::checkDequantizable((*tensor)->type, int64_t(sizes[index])))
        return file.tensorError(names[index], llvm::toString(std::move(error)));
      TensorConversion conversion;
      conversion.tensor = *tensor;
      conversion.isMatrix = false;
      conversion.vector = DeviceVector{result.offset + first * 4, sizes[index]};
      layout.hostConversionBytes =
          std::max(layout.hostConversionBytes, sizes[index] * 4);
      layout.conversions.push_back(conversion);
      first += sizes[index];
    }
    return result;
  }

private:
  /// Device kernel when it reads the type, else the host's bf16 conversion.
  llvm::Error choose(TensorConversion &conversion, uint64_t bf16Bytes) {
    const GgufTensor &tensor = *conversion.tensor;
    if (deviceReads(tensor.type)) {
      conversion.onDevice = true;
      layout.stagingBytes = std::max(layout.stagingBytes, tensor.numBytes);
      return llvm::Error::success();
    }
    if (llvm::Error error =
            model::checkDequantizable(tensor.type, int64_t(tensor.shape[0])))
      return file.tensorError(tensor.name, llvm::toString(std::move(error)));
    conversion.onDevice = false;
    layout.hostConversionBytes =
        std::max(layout.hostConversionBytes, bf16Bytes);
    return llvm::Error::success();
  }

  const GgufFile &file;
  llvm::function_ref<bool(model::GgmlType)> deviceReads;
  CudaWeightLayout &layout;
};

} // namespace

llvm::Expected<CudaWeightLayout>
planCudaWeights(const model::GgufFile &file, const model::ModelConfig &config,
                llvm::function_ref<bool(model::GgmlType)> deviceReads) {
  CudaWeightLayout layout;
  Planner planner(file, deviceReads, layout);
  const uint64_t dim = config.embeddingDim;
  const uint64_t queryDim = uint64_t(config.numHeads) * config.headDim;
  const uint64_t kvDim = uint64_t(config.numKvHeads) * config.headDim;
  const uint64_t ffnDim = config.feedForwardDim;
  std::string embeddingName[] = {"token_embd.weight"};
  uint64_t vocabRows[] = {config.vocabSize};
  auto embedding = planner.matrix(embeddingName, vocabRows, dim);
  if (!embedding)
    return embedding.takeError();
  layout.embedding = *embedding;
  for (uint32_t index = 0; index < config.numLayers; ++index) {
    const std::string prefix = "blk." + std::to_string(index) + ".";
    CudaLayerWeights layer;
    auto attentionNorm = planner.vector(prefix + "attn_norm.weight", dim);
    if (!attentionNorm)
      return attentionNorm.takeError();
    layer.attentionNorm = *attentionNorm;
    std::string qkvNames[] = {prefix + "attn_q.weight",
                              prefix + "attn_k.weight",
                              prefix + "attn_v.weight"};
    uint64_t qkvRows[] = {queryDim, kvDim, kvDim};
    auto queryKeyValue = planner.matrix(qkvNames, qkvRows, dim);
    if (!queryKeyValue)
      return queryKeyValue.takeError();
    layer.queryKeyValue = *queryKeyValue;
    if (config.qkvBias) {
      std::string biasNames[] = {prefix + "attn_q.bias", prefix + "attn_k.bias",
                                 prefix + "attn_v.bias"};
      auto bias = planner.stackedVector(biasNames, qkvRows);
      if (!bias)
        return bias.takeError();
      layer.queryKeyValueBias = *bias;
    }
    std::string outputName[] = {prefix + "attn_output.weight"};
    uint64_t outputRows[] = {dim};
    auto attentionOutput = planner.matrix(outputName, outputRows, queryDim);
    if (!attentionOutput)
      return attentionOutput.takeError();
    layer.attentionOutput = *attentionOutput;
    auto feedForwardNorm = planner.vector(prefix + "ffn_norm.weight", dim);
    if (!feedForwardNorm)
      return feedForwardNorm.takeError();
    layer.feedForwardNorm = *feedForwardNorm;
    std::string gateUpNames[] = {prefix + "ffn_gate.weight",
                                 prefix + "ffn_up.weight"};
    uint64_t gateUpRows[] = {ffnDim, ffnDim};
    auto gateUp = planner.matrix(gateUpNames, gateUpRows, dim);
    if (!gateUp)
      return gateUp.takeError();
    layer.gateUp = *gateUp;
    std::string downName[] = {prefix + "ffn_down.weight"};
    auto down = planner.matrix(downName, outputRows, ffnDim);
    if (!down)
      return down.takeError();
    layer.down = *down;
    layout.layers.push_back(layer);
  }
  auto outputNorm = planner.vector("output_norm.weight", dim);
  if (!outputNorm)
    return outputNorm.takeError();
  layout.outputNorm = *outputNorm;
  if (config.tiedOutput) {
    layout.output = layout.embedding;
  } else {
    std::string headName[] = {"output.weight"};
    auto output = planner.matrix(headName, vocabRows, dim);
    if (!output)
      return output.takeError();
    layout.output = *output;
  }
  return layout;
}

} // namespace spanc::backend
