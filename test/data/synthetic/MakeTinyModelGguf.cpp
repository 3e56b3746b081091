//===- MakeTinyModelGguf.cpp - Tiny random-weight decoder GGUF models -----===//
//
// Writes a complete, runnable decoder with random weights and the synthetic
// ChatML vocabulary (TinyChatmlVocabulary.h), so the runtime's correctness
// tests (span-cache hit = miss, ReRoPE, eviction, prefix = off; see
// test/unit/sched) also run on a model the project makes itself, in
// seconds, without the installed SmolLM2.
//
// Shape: 2 layers, embedding 256, 4 query heads and 2 KV heads (GQA) of
// head dim 64 (the attention and ReRoPE kernels' AVX-512 paths), FFN 512,
// context 4096, f32 tensors, an untied output head. `llama` uses the normal
// (adjacent-pair) RoPE order; `qwen2` the NeoX (halves) order and Q/K/V
// biases. Weights are deterministic (fixed seed) normal draws scaled so
// attention scores and logits have an O(1) spread: attention is neither
// uniform nor one-hot and greedy choices are rarely near-ties.
//
//===----------------------------------------------------------------------===//

#include "test/data/synthetic/TinyChatmlVocabulary.h"

#include "runtime/model/GgufWriter.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace spanc::model;

namespace {

constexpr uint32_t NumLayers = 2, EmbeddingDim = 256, NumHeads = 4,
                   NumKvHeads = 2, HeadDim = 64, FeedForwardDim = 512,
                   ContextLength = 4096;

class Weights {
public:
  explicit Weights(uint32_t seed) : random(seed) {}
  /// `rows` x `columns` draws of N(mean, deviation) (GGUF shape
  /// [columns, rows]).
  void add(GgufWriter &writer, const std::string &name, uint64_t columns,
           uint64_t rows, float mean, float deviation) {
    std::normal_distribution<float> normal(mean, deviation);
    std::vector<float> values(size_t(columns * rows));
    for (float &value : values)
      value = normal(random);
    if (rows == 1)
      writer.addTensorF32(name, {columns}, values);
    else
      writer.addTensorF32(name, {columns, rows}, values);
  }

private:
  std::mt19937 random;
};

} // namespace

int main(int argc, char **argv) {
  if (argc != 3 || (llvm::StringRef(argv[1]) != "--arch=llama" &&
                    llvm::StringRef(argv[1]) != "--arch=qwen2")) {
    llvm::errs() << "usage: make_tiny_model_gguf --arch=llama|qwen2 OUT.gguf\n";
    return 2;
  }
  const std::string arch = llvm::StringRef(argv[1]).drop_front(7).str();
  GgufWriter writer;
  writer.addString("general.architecture", arch);
  writer.addString("general.name", "tiny-" + arch + "-synthetic");
  const size_t vocabSize = spanc::synthetic::addTinyChatmlVocabulary(writer);
  writer.addUInt32(arch + ".block_count", NumLayers);
  writer.addUInt32(arch + ".embedding_length", EmbeddingDim);
  writer.addUInt32(arch + ".feed_forward_length", FeedForwardDim);
  writer.addUInt32(arch + ".attention.head_count", NumHeads);
  writer.addUInt32(arch + ".attention.head_count_kv", NumKvHeads);
  writer.addUInt32(arch + ".context_length", ContextLength);
  writer.addFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.addFloat32(arch + ".rope.freq_base", 10000.0f);

  Weights weights(arch == "llama" ? 20261129u : 20261130u);
  const uint64_t queryDim = uint64_t(NumHeads) * HeadDim;
  const uint64_t kvDim = uint64_t(NumKvHeads) * HeadDim;
  // Inputs to every projection are RMS-normalized (unit RMS), so a
  // deviation of 1/sqrt(fan-in) gives outputs of unit RMS.
  const float inputScale = 1.0f / std::sqrt(float(EmbeddingDim));
  weights.add(writer, "token_embd.weight", EmbeddingDim, vocabSize, 0.0f, 1.0f);
  for (uint32_t layer = 0; layer < NumLayers; ++layer) {
    const std::string prefix = "blk." + std::to_string(layer) + ".";
    weights.add(writer, prefix + "attn_norm.weight", EmbeddingDim, 1, 1.0f,
                0.1f);
    weights.add(writer, prefix + "attn_q.weight", EmbeddingDim, queryDim, 0.0f,
                inputScale);
    weights.add(writer, prefix + "attn_k.weight", EmbeddingDim, kvDim, 0.0f,
                inputScale);
    weights.add(writer, prefix + "attn_v.weight", EmbeddingDim, kvDim, 0.0f,
                inputScale);
    if (arch == "qwen2") {
      weights.add(writer, prefix + "attn_q.bias", queryDim, 1, 0.0f, 0.3f);
      weights.add(writer, prefix + "attn_k.bias", kvDim, 1, 0.0f, 0.3f);
      weights.add(writer, prefix + "attn_v.bias", kvDim, 1, 0.0f, 0.3f);
    }
    weights.add(writer, prefix + "attn_output.weight", queryDim, EmbeddingDim,
                0.0f, 1.0f / std::sqrt(float(queryDim)));
    weights.add(writer, prefix + "ffn_norm.weight", EmbeddingDim, 1, 1.0f,
                0.1f);
    weights.add(writer, prefix + "ffn_gate.weight", EmbeddingDim,
                FeedForwardDim, 0.0f, inputScale);
    weights.add(writer, prefix + "ffn_up.weight", EmbeddingDim, FeedForwardDim,
                0.0f, inputScale);
    weights.add(writer, prefix + "ffn_down.weight", FeedForwardDim,
                EmbeddingDim, 0.0f, 1.0f / std::sqrt(float(FeedForwardDim)));
  }
  weights.add(writer, "output_norm.weight", EmbeddingDim, 1, 1.0f, 0.1f);
  // Logits with a spread of ~2: greedy picks are clear.
  weights.add(writer, "output.weight", EmbeddingDim, vocabSize, 0.0f,
              2.0f * inputScale);
  if (llvm::Error error = writer.writeToFile(argv[2])) {
    llvm::errs() << "make_tiny_model_gguf: " << llvm::toString(std::move(error))
                 << "\n";
    return 1;
  }
  return 0;
}
