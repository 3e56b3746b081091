//===- Weights.cpp - A decoder's weights, converted once for the CPU ------===//

#include "runtime/model/Weights.h"

#include "runtime/model/Gguf.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

namespace spanc::model {

namespace {

/// Finds `name` and checks it is a [columns, rows] (GGUF order) matrix, or a
/// [columns] vector when rows == 0, of a type we can dequantize.
llvm::Expected<const GgufTensor *> findChecked(const GgufFile &file,
                                               llvm::StringRef name,
                                               uint64_t columns,
                                               uint64_t rows) {
  auto tensor = file.getTensorOfShape(name, columns, rows);
  if (!tensor)
    return tensor.takeError();
  if (llvm::Error error =
          checkDequantizable((*tensor)->type, int64_t((*tensor)->shape[0])))
    return file.tensorError(name, llvm::toString(std::move(error)));
  return tensor;
}

/// The index of the first NaN or infinity among `count` values, or -1.
int64_t firstNonFinite(const float *values, int64_t count) {
  // One pass of integer operations the compiler vectorizes (the row was
  // just written: it is in cache): an exponent of all ones, plus one at
  // its lowest bit, carries into the sign bit. The index is looked for
  // only when something is wrong.
  // (GCC's -O2 cost model leaves a loop of unknown length scalar: the
  // pragma asks for the vectors, which cut the check's cost on SmolLM2
  // from 0.15 s to ~0.02 s of CPU per load.)
  uint32_t carried = 0;
#pragma omp simd reduction(| : carried)
  for (int64_t index = 0; index < count; ++index) {
    uint32_t bits;
    std::memcpy(&bits, values + index, sizeof bits);
    carried |= (bits & 0x7f800000u) + 0x00800000u;
  }
  if (!(carried & 0x80000000u))
    return -1;
  for (int64_t index = 0; index < count; ++index)
    if (!std::isfinite(values[index]))
      return index;
  return -1;
}

/// "tensor 'NAME': element [COLUMN, ROW] is nan: ...", for the first value
/// of row `row` that is not finite.
llvm::Error nonFiniteRowError(const GgufFile &file, const GgufTensor &tensor,
                              int64_t row) {
  const int64_t columns = int64_t(tensor.shape[0]);
  std::vector<float> values(static_cast<size_t>(columns));
  dequantizeRow(tensor.type, tensor.data + uint64_t(row) * tensor.rowBytes(),
                values.data(), columns);
  const int64_t column = firstNonFinite(values.data(), columns);
  const float value = values[size_t(column)];
  return file.tensorError(
      tensor.name,
      "element [" + llvm::Twine(column) +
          (tensor.shape.size() > 1 ? ", " + llvm::Twine(row) + "] is "
                                   : llvm::Twine("] is ")) +
          (std::isnan(value) ? "nan" : "infinite") +
          ": a weight that is not finite makes every output "
          "NaN (a corrupt file?)");
}

/// Dequantizes a whole tensor's rows into `out` starting at row `firstRow`
/// (out holds rows of tensor->shape[0] floats), and fails, naming the
/// first, when a value is NaN or infinite: one such weight turns every
/// activation after it into NaN and the model answers nothing.
llvm::Error dequantizeInto(const GgufFile &file, const GgufTensor &tensor,
                           std::vector<float> &out, int64_t firstRow) {
  const int64_t columns = int64_t(tensor.shape[0]);
  const int64_t rows = int64_t(tensor.numRows());
  const uint64_t rowBytes = tensor.rowBytes();
  int64_t badRow = rows;
#pragma omp parallel for schedule(static) reduction(min : badRow)
  for (int64_t row = 0; row < rows; ++row) {
    float *values = out.data() + (firstRow + row) * columns;
    dequantizeRow(tensor.type, tensor.data + uint64_t(row) * rowBytes, values,
                  columns);
    if (firstNonFinite(values, columns) >= 0)
      badRow = std::min(badRow, row);
  }
  return badRow == rows ? llvm::Error::success()
                        : nonFiniteRowError(file, tensor, badRow);
}

/// Checks every value of `tensor` is finite, as dequantizeInto does, a row
/// at a time into a small buffer: for a tensor that is not unpacked whole.
llvm::Error checkFinite(const GgufFile &file, const GgufTensor &tensor) {
  const int64_t columns = int64_t(tensor.shape[0]);
  const int64_t rows = int64_t(tensor.numRows());
  const uint64_t rowBytes = tensor.rowBytes();
  int64_t badRow = rows;
#pragma omp parallel reduction(min : badRow)
  {
    std::vector<float> values(static_cast<size_t>(columns));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      dequantizeRow(tensor.type, tensor.data + uint64_t(row) * rowBytes,
                    values.data(), columns);
      if (firstNonFinite(values.data(), columns) >= 0)
        badRow = std::min(badRow, row);
    }
  }
  return badRow == rows ? llvm::Error::success()
                        : nonFiniteRowError(file, tensor, badRow);
}

llvm::Expected<std::vector<float>>
loadVector(const GgufFile &file, llvm::StringRef name, uint64_t size) {
  auto tensor = findChecked(file, name, size, 0);
  if (!tensor)
    return tensor.takeError();
  std::vector<float> values(size);
  if (llvm::Error error = dequantizeInto(file, **tensor, values, 0))
    return error;
  return values;
}

/// Loads the named matrices (each [columns, rows_i]) stacked by rows and
/// packs them as one GEMM weight (`gated`: [gate; up] for multiplyGated).
llvm::Expected<cpu::GemmWeights>
loadStacked(const GgufFile &file, cpu::GemmEngine &engine,
            llvm::ArrayRef<std::string> names, llvm::ArrayRef<uint64_t> rows,
            uint64_t columns, bool gated = false) {
  uint64_t totalRows = 0;
  for (uint64_t count : rows)
    totalRows += count;
  std::vector<float> matrix(totalRows * columns);
  uint64_t firstRow = 0;
  for (size_t index = 0; index < names.size(); ++index) {
    auto tensor = findChecked(file, names[index], columns, rows[index]);
    if (!tensor)
      return tensor.takeError();
    if (llvm::Error error =
            dequantizeInto(file, **tensor, matrix, int64_t(firstRow)))
      return error;
    firstRow += rows[index];
  }
  auto packed = gated ? engine.packGatedWeights(
                            matrix.data(), int64_t(totalRows), int64_t(columns))
                      : engine.packWeights(matrix.data(), int64_t(totalRows),
                                           int64_t(columns));
  if (!packed)
    return file.tensorError(names[0], llvm::toString(packed.takeError()));
  return packed;
}

/// The tensors as QuantGemv views, when their blocks are all of one kind
/// it reads and they have one width; empty otherwise.
llvm::SmallVector<cpu::QuantMatrix, 3>
quantViews(llvm::ArrayRef<const GgufTensor *> tensors) {
  llvm::SmallVector<cpu::QuantMatrix, 3> parts;
  for (const GgufTensor *tensor : tensors) {
    cpu::QuantMatrix view;
    if (tensor->shape.size() != 2 || tensor->shape[0] % 32 != 0)
      return {};
    if (tensor->type == GgmlType::Q4_1)
      view.format = cpu::QuantFormat::Q4_1;
    else if (tensor->type == GgmlType::Q8_0)
      view.format = cpu::QuantFormat::Q8_0;
    else
      return {};
    if (!parts.empty() && (view.format != parts[0].format ||
                           int64_t(tensor->shape[0]) != parts[0].columns))
      return {};
    view.data = tensor->data;
    view.columns = int64_t(tensor->shape[0]);
    view.rows = int64_t(tensor->shape[1]);
    view.rowBytes = int64_t(tensor->rowBytes());
    parts.push_back(view);
  }
  return parts;
}

/// Repacks the tensors, stacked by rows, for QuantGemv, when quantViews
/// takes them (one matrix: one parallel region per step).
bool packQuantized(llvm::ArrayRef<const GgufTensor *> tensors,
                   cpu::PackedQuantMatrix &packed) {
  llvm::SmallVector<cpu::QuantMatrix, 3> parts = quantViews(tensors);
  if (parts.empty())
    return false;
  packed = cpu::packQuantMatrices(parts.data(), parts.size());
  return true;
}

/// One GEMM weight: the named matrices ([columns, rows_i] each) stacked by
/// rows; `gated`: [gate; up] for multiplyGated.
struct StackedProjection {
  llvm::ArrayRef<std::string> names;
  llvm::ArrayRef<uint64_t> rows;
  uint64_t columns = 0;
  bool gated = false;
};

/// Loads a layer's four projections. When every one is Q4_1 or Q8_0 they
/// are repacked for decode rows (QuantGemv), and where the engine can and
/// `borrow` asks, the prompt GEMMs borrow those tiles (unpacked per call)
/// rather than keep a bf16 copy of their own; otherwise each is
/// dequantized and packed. With `quantizedOnly`, a layer whose formats the
/// CPU multiplies prompt rows of in int8 keeps the tiles alone.
llvm::Error loadProjections(const GgufFile &file, cpu::GemmEngine &engine,
                            llvm::ArrayRef<StackedProjection> projections,
                            bool borrow, bool quantizedOnly,
                            LayerWeights &layer) {
  cpu::GemmWeights *packed[] = {&layer.queryKeyValue, &layer.attentionOutput,
                                &layer.gateUp, &layer.down};
  cpu::PackedQuantMatrix *quantized[] = {
      &layer.queryKeyValueQuantized, &layer.attentionOutputQuantized,
      &layer.gateUpQuantized, &layer.downQuantized};
  assert(projections.size() == 4 && "QKV, attention output, gate|up, down");
  llvm::SmallVector<const GgufTensor *, 3> tensors[4];
  for (size_t index = 0; index < 4; ++index)
    for (size_t part = 0; part < projections[index].names.size(); ++part) {
      auto tensor = findChecked(file, projections[index].names[part],
                                projections[index].columns,
                                projections[index].rows[part]);
      if (!tensor)
        return tensor.takeError();
      tensors[index].push_back(*tensor);
    }
  llvm::SmallVector<cpu::QuantMatrix, 3> views[4];
  layer.hasQuantized = true;
  for (size_t index = 0; index < 4; ++index) {
    views[index] = quantViews(tensors[index]);
    layer.hasQuantized = layer.hasQuantized && !views[index].empty();
  }
  auto packQuantizedViews = [&] {
    for (size_t index = 0; index < 4; ++index)
      *quantized[index] =
          cpu::packQuantMatrices(views[index].data(), views[index].size());
  };

  auto int8Rows = [&] {
    for (size_t index = 0; index < 4; ++index)
      if (!cpu::hasQuantGemmKernel(views[index].front().format))
        return false;
    return true;
  };
  layer.quantizedOnly = quantizedOnly && layer.hasQuantized && int8Rows();
  if (layer.quantizedOnly ||
      (borrow && layer.hasQuantized && engine.canBorrowQuantized())) {
    // The values are checked as dequantizing them would have.
    for (const auto &stacked : tensors)
      for (const GgufTensor *tensor : stacked)
        if (llvm::Error error = checkFinite(file, *tensor))
          return error;
    packQuantizedViews();
    if (layer.quantizedOnly)
      return llvm::Error::success();
    for (size_t index = 0; index < 4; ++index)
      *packed[index] =
          engine.borrowQuantized(*quantized[index], projections[index].gated);
    return llvm::Error::success();
  }
  for (size_t index = 0; index < 4; ++index) {
    const StackedProjection &projection = projections[index];
    auto weights = loadStacked(file, engine, projection.names, projection.rows,
                               projection.columns, projection.gated);
    if (!weights)
      return weights.takeError();
    *packed[index] = std::move(*weights);
  }
  // The 4/8-bit copies after the packed ones: in the other order the QKV
  // and gate|up GEMMs ran ~30 % slower on an AMX host (placement in memory,
  // measured, not understood; bench engine --gemm-weights=copy --profile).
  if (layer.hasQuantized)
    packQuantizedViews();
  return llvm::Error::success();
}

std::string describeShape(const GgufTensor &tensor) {
  std::string shape;
  for (uint64_t dim : tensor.shape)
    shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
  return "[" + shape + "]";
}

/// Checks the sizes the metadata declares against the tensors of the
/// first and last layers before anything is allocated from them, naming
/// the key at fault (a feed_forward_length of 2^32 - 1 asked for 20 TB).
/// Each layer's tensors are checked again as they load.
llvm::Error checkDeclaredSizes(const GgufFile &file,
                               const ModelConfig &config) {
  const std::string arch = config.architecture + ".";
  auto sizeError = [&](const llvm::Twine &message) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        (llvm::Twine(file.name()) + ": " + message).str());
  };
  // The layers: blk.0 .. blk.(block_count - 1), and no more (a model run
  // on fewer layers than it has answers, wrongly).
  uint64_t layersInFile = 0;
  while (file.findTensor("blk." + std::to_string(layersInFile) +
                         ".attn_norm.weight"))
    ++layersInFile;
  if (layersInFile != config.numLayers) {
    std::string range =
        layersInFile
            ? " (tensors blk.0 to blk." + std::to_string(layersInFile - 1) + ")"
            : std::string();
    return sizeError(arch + "block_count is " + llvm::Twine(config.numLayers) +
                     ", but the file holds " + llvm::Twine(layersInFile) +
                     " layers" + range);
  }
  // Without attention.key_length, the head dimension is derived from
  // head_count: say so, since that is the key to look at then.
  std::string keyLength = file.contains(arch + "attention.key_length")
                              ? "key_length"
                              : "key_length (embedding_length / head_count)";
  struct DeclaredRows {
    const char *tensor;
    uint64_t rows;
    std::string what;
  } declaredRows[] = {
      {"attn_q.weight", uint64_t(config.numHeads) * config.headDim,
       arch + "attention.head_count x " + keyLength + " (" +
           std::to_string(config.numHeads) + " x " +
           std::to_string(config.headDim) + ")"},
      {"attn_k.weight", uint64_t(config.numKvHeads) * config.headDim,
       arch + "attention.head_count_kv x " + keyLength + " (" +
           std::to_string(config.numKvHeads) + " x " +
           std::to_string(config.headDim) + ")"},
      {"ffn_gate.weight", config.feedForwardDim,
       arch + "feed_forward_length (" + std::to_string(config.feedForwardDim) +
           ")"},
      {"ffn_up.weight", config.feedForwardDim,
       arch + "feed_forward_length (" + std::to_string(config.feedForwardDim) +
           ")"},
  };
  for (uint32_t layer : {0u, config.numLayers - 1})
    for (const DeclaredRows &check : declaredRows) {
      std::string name =
          "blk." + std::to_string(layer) + "." + std::string(check.tensor);
      const GgufTensor *tensor = file.findTensor(name);
      if (!tensor)
        return sizeError("tensor '" + name + "' is missing");
      if (tensor->shape.size() != 2 ||
          tensor->shape[0] != config.embeddingDim ||
          tensor->shape[1] != check.rows)
        return sizeError(check.what + " and " + arch + "embedding_length (" +
                         llvm::Twine(config.embeddingDim) +
                         ") do not match tensor '" + name + "' of shape " +
                         describeShape(*tensor));
    }
  return llvm::Error::success();
}

void decodeGgmlRow(const void *row, float *out, int64_t count,
                   const void *context) {
  dequantizeRow(*static_cast<const GgmlType *>(context), row, out, count);
}

} // namespace

llvm::Expected<std::unique_ptr<ModelWeights>>
ModelWeights::load(const GgufFile &file, const ModelConfig &config,
                   cpu::GemmEngine &engine, bool gatedFeedForward,
                   bool borrowQuantized, bool quantizedOnly) {
  if (llvm::Error error = checkDeclaredSizes(file, config))
    return error;
  std::unique_ptr<ModelWeights> weights(new ModelWeights());
  const uint64_t dim = config.embeddingDim;
  const uint64_t queryDim = uint64_t(config.numHeads) * config.headDim;
  const uint64_t kvDim = uint64_t(config.numKvHeads) * config.headDim;
  const uint64_t ffnDim = config.feedForwardDim;

  auto embedding =
      findChecked(file, "token_embd.weight", dim, config.vocabSize);
  if (!embedding)
    return embedding.takeError();
  weights->embeddingType = (*embedding)->type;
  weights->embedding.data = (*embedding)->data;
  weights->embedding.numRows = config.vocabSize;
  weights->embedding.dim = int64_t(dim);
  weights->embedding.rowBytes = int64_t((*embedding)->rowBytes());
  weights->embedding.decode = decodeGgmlRow;
  weights->embedding.context = &weights->embeddingType;

  for (uint32_t layer = 0; layer < config.numLayers; ++layer) {
    std::string prefix = "blk." + std::to_string(layer) + ".";
    LayerWeights layerWeights;
    auto attentionNorm = loadVector(file, prefix + "attn_norm.weight", dim);
    if (!attentionNorm)
      return attentionNorm.takeError();
    layerWeights.attentionNorm = std::move(*attentionNorm);
    auto feedForwardNorm = loadVector(file, prefix + "ffn_norm.weight", dim);
    if (!feedForwardNorm)
      return feedForwardNorm.takeError();
    layerWeights.feedForwardNorm = std::move(*feedForwardNorm);

    std::string qkvNames[] = {prefix + "attn_q.weight",
                              prefix + "attn_k.weight",
                              prefix + "attn_v.weight"};
    uint64_t qkvRows[] = {queryDim, kvDim, kvDim};
    std::string outputName[] = {prefix + "attn_output.weight"};
    uint64_t outputRows[] = {dim};
    std::string gateUpNames[] = {prefix + "ffn_gate.weight",
                                 prefix + "ffn_up.weight"};
    uint64_t gateUpRows[] = {ffnDim, ffnDim};
    std::string downName[] = {prefix + "ffn_down.weight"};
    uint64_t downRows[] = {dim};
    const StackedProjection projections[] = {
        {qkvNames, qkvRows, dim},
        {outputName, outputRows, queryDim},
        {gateUpNames, gateUpRows, dim, gatedFeedForward},
        {downName, downRows, ffnDim}};
    if (llvm::Error error =
            loadProjections(file, engine, projections, borrowQuantized,
                            quantizedOnly, layerWeights))
      return error;
    if (config.qkvBias) {
      const char *biasNames[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
      for (int part = 0; part < 3; ++part) {
        auto bias = loadVector(file, prefix + biasNames[part], qkvRows[part]);
        if (!bias)
          return bias.takeError();
        layerWeights.queryKeyValueBias.insert(
            layerWeights.queryKeyValueBias.end(), bias->begin(), bias->end());
      }
    }
    weights->layerWeights.push_back(std::move(layerWeights));
  }

  auto finalNorm = loadVector(file, "output_norm.weight", dim);
  if (!finalNorm)
    return finalNorm.takeError();
  weights->finalNorm = std::move(*finalNorm);
  weights->file = &file;
  weights->engine = &engine;
  weights->borrowHead = borrowQuantized && engine.canBorrowQuantized();
  weights->headName = config.tiedOutput ? "token_embd.weight" : "output.weight";
  weights->headRows = config.vocabSize;
  auto head = findChecked(file, weights->headName, dim, config.vocabSize);
  if (!head)
    return head.takeError();
  weights->hasQuantizedOutput =
      packQuantized({*head}, weights->outputQuantized);
  // The GEMM copy waits for output(); its values are checked now, so a
  // corrupt head still fails the load.
  if (weights->hasQuantizedOutput) {
    if (llvm::Error error = checkFinite(file, **head))
      return error;
  } else if (auto packed = weights->output(); !packed) {
    return packed.takeError();
  }

  auto factors = loadRopeFrequencyFactors(file, config);
  if (!factors)
    return factors.takeError();
  weights->ropeFreqs = std::move(*factors);
  return weights;
}

llvm::Expected<std::vector<float>>
loadRopeFrequencyFactors(const GgufFile &file, const ModelConfig &config) {
  if (!config.hasRopeFrequencyFactors)
    return std::vector<float>();
  return loadVector(file, "rope_freqs.weight", config.rotaryDim / 2);
}

llvm::Error checkFiniteVectors(const GgufFile &file) {
  for (const GgufTensor &tensor : file.tensors()) {
    if (tensor.shape.size() != 1)
      continue;
    // A vector of a type the host cannot read is the device's to refuse.
    if (llvm::Error error =
            checkDequantizable(tensor.type, int64_t(tensor.shape[0]))) {
      llvm::consumeError(std::move(error));
      continue;
    }
    std::vector<float> values(tensor.shape[0]);
    if (llvm::Error error = dequantizeInto(file, tensor, values, 0))
      return error;
  }
  return llvm::Error::success();
}

llvm::Expected<const cpu::GemmWeights *> ModelWeights::output() const {
  std::call_once(headPacked, [&] {
    if (hasQuantizedOutput && borrowHead) {
      outputHead = engine->borrowQuantized(outputQuantized, false);
      return;
    }
    std::string names[] = {headName};
    uint64_t rows[] = {headRows};
    auto packed =
        loadStacked(*file, *engine, names, rows, uint64_t(embedding.dim));
    if (packed)
      outputHead = std::move(*packed);
    else
      headError = llvm::toString(packed.takeError());
  });
  if (!headError.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), headError);
  return &outputHead;
}

int64_t ModelWeights::packedBytes() const {
  int64_t total =
      outputHead.sizeInBytes() + int64_t(outputQuantized.bytes.size());
  for (const LayerWeights &layer : layerWeights)
    total += layer.queryKeyValue.sizeInBytes() +
             layer.attentionOutput.sizeInBytes() + layer.gateUp.sizeInBytes() +
             layer.down.sizeInBytes() +
             int64_t(layer.queryKeyValueQuantized.bytes.size() +
                     layer.attentionOutputQuantized.bytes.size() +
                     layer.gateUpQuantized.bytes.size() +
                     layer.downQuantized.bytes.size());
  return total;
}

} // namespace spanc::model
