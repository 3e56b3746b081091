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
// `--shape=llama3-8b` writes the same kind of model at the paper's scale
// for bench/gpu.sh: Llama-3-8B's decoder (32 layers, embedding 4096, 32
// query and 8 KV heads of dim 128, FFN 14336, RoPE base 500000) with a
// context of 131072 (Llama 3.1's, so 32 documents of 2857 tokens fit) and
// the same synthetic vocabulary (so the output head is small: its cost is
// not the paper's 128K-row head). `--type=q8_0` stores the matrices as
// Q8_0 blocks of uniform int8 draws with the normal draws' deviation
// (7.4 GB for llama3-8b, written in seconds); `--type=f32` is the default.
//
//===----------------------------------------------------------------------===//

#include "test/data/synthetic/TinyChatmlVocabulary.h"

#include "runtime/model/GgufWriter.h"
#include "runtime/model/Quantization.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace spanc::model;

namespace {

struct Shape {
  uint32_t numLayers, embeddingDim, numHeads, numKvHeads, headDim,
      feedForwardDim, contextLength;
  float ropeBase;
};

constexpr Shape kTiny{2, 256, 4, 2, 64, 512, 4096, 10000.0f};
constexpr Shape kLlama3x8b{32, 4096, 32, 8, 128, 14336, 131072, 500000.0f};

class Weights {
public:
  Weights(uint32_t seed, bool quantized)
      : random(seed), quantized(quantized), state(seed | 1) {}
  /// `rows` x `columns` draws of N(mean, deviation) (GGUF shape
  /// [columns, rows]); Q8_0 matrices when quantized (vectors stay f32).
  void add(GgufWriter &writer, const std::string &name, uint64_t columns,
           uint64_t rows, float mean, float deviation) {
    if (quantized && rows > 1 && columns % 32 == 0) {
      addQ8(writer, name, columns, rows, deviation);
      return;
    }
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
  /// Q8_0 blocks (an f16 scale, 32 int8): int8 uniform on [-127, 127]
  /// (deviation 73.3) scaled to `deviation`; a xorshift generator, since
  /// the 8B shape draws 7 billion of them.
  void addQ8(GgufWriter &writer, const std::string &name, uint64_t columns,
             uint64_t rows, float deviation) {
    const uint64_t blocks = columns * rows / 32;
    std::string data(blocks * 34, '\0');
    const uint16_t scale = floatToHalf(deviation / 73.3f);
    for (uint64_t block = 0; block < blocks; ++block) {
      char *out = data.data() + block * 34;
      std::memcpy(out, &scale, 2);
      for (int quarter = 0; quarter < 4; ++quarter) {
        uint64_t bits = next();
        for (int byte = 0; byte < 8; ++byte)
          out[2 + quarter * 8 + byte] =
              char(int((bits >> (8 * byte)) & 0xff) % 255 - 127);
      }
    }
    writer.addTensor(name, GgmlType::Q8_0, {columns, rows}, data);
  }
  uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }

  std::mt19937 random;
  bool quantized;
  uint64_t state;
};

} // namespace

int main(int argc, char **argv) {
  std::string arch, output;
  Shape shape = kTiny;
  std::string shapeName = "tiny", type = "f32";
  bool usage = false;
  for (int index = 1; index < argc; ++index) {
    llvm::StringRef argument(argv[index]);
    if (argument == "--arch=llama" || argument == "--arch=qwen2")
      arch = argument.drop_front(7).str();
    else if (argument == "--shape=tiny" || argument == "--shape=llama3-8b")
      shapeName = argument.drop_front(8).str();
    else if (argument == "--type=f32" || argument == "--type=q8_0")
      type = argument.drop_front(7).str();
    else if (!argument.startswith("--") && output.empty())
      output = argument.str();
    else
      usage = true;
  }
  if (usage || arch.empty() || output.empty()) {
    llvm::errs() << "usage: make_tiny_model_gguf --arch=llama|qwen2 "
                    "[--shape=tiny|llama3-8b] [--type=f32|q8_0] OUT.gguf\n";
    return 2;
  }
  if (shapeName == "llama3-8b")
    shape = kLlama3x8b;
  const uint32_t NumLayers = shape.numLayers, EmbeddingDim = shape.embeddingDim,
                 NumHeads = shape.numHeads, NumKvHeads = shape.numKvHeads,
                 HeadDim = shape.headDim, FeedForwardDim = shape.feedForwardDim,
                 ContextLength = shape.contextLength;
  GgufWriter writer;
  writer.addString("general.architecture", arch);
  writer.addString("general.name",
                   shapeName == "tiny"
                       ? "tiny-" + arch + "-synthetic"
                       : shapeName + "-shape-" + arch + "-synthetic-" + type);
  const size_t vocabSize = spanc::synthetic::addTinyChatmlVocabulary(writer);
  writer.addUInt32(arch + ".block_count", NumLayers);
  writer.addUInt32(arch + ".embedding_length", EmbeddingDim);
  writer.addUInt32(arch + ".feed_forward_length", FeedForwardDim);
  writer.addUInt32(arch + ".attention.head_count", NumHeads);
  writer.addUInt32(arch + ".attention.head_count_kv", NumKvHeads);
  writer.addUInt32(arch + ".context_length", ContextLength);
  writer.addFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.addFloat32(arch + ".rope.freq_base", shape.ropeBase);
  if (HeadDim * NumHeads != EmbeddingDim)
    writer.addUInt32(arch + ".attention.key_length", HeadDim);

  Weights weights(arch == "llama" ? 20261129u : 20261130u, type == "q8_0");
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
  if (llvm::Error error = writer.writeToFile(output)) {
    llvm::errs() << "make_tiny_model_gguf: " << llvm::toString(std::move(error))
                 << "\n";
    return 1;
  }
  return 0;
}
