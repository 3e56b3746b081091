//===- MakeModelSeeds.cpp - Seeds for the Model::load fuzz target ---------===//
//
// Writes the smallest complete decoders Model::load accepts, one per
// architecture and weight type the loader has a path for (llama and qwen2;
// f32, f16, Q4_1 and Q8_0 projections; tied and untied output heads), so
// that the fuzzer starts from files that load and run and mutates from
// there. Shape: 1 layer, embedding 32, 2 query heads and 1 KV head of
// dimension 16, FFN 32, 8 tokens: a few KB each. Two more (seed-*-hd32)
// have heads of dimension 32 (embedding 64, FFN 64), the smallest the
// AMX attention folds (AttentionAmx.cpp), so that on a host with AMX the
// fuzzer reaches those tiles too.
//
//   make_model_seeds OUT_DIR    # writes OUT_DIR/seed-*.bin
//
//===----------------------------------------------------------------------===//

#include "runtime/model/GgufWriter.h"
#include "runtime/model/Quantization.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using namespace spanc::model;

namespace {

constexpr uint64_t NumHeads = 2, NumKvHeads = 1, VocabSize = 8;
/// The first seeds' head width; wider seeds are named and drawn apart.
constexpr uint64_t BaseHeadDim = 16;

/// A seed's widths: heads of `headDim`, an embedding of NumHeads of them,
/// an FFN as wide as the embedding.
struct SeedShape {
  uint64_t headDim;
  uint64_t embeddingDim() const { return NumHeads * headDim; }
  uint64_t feedForwardDim() const { return embeddingDim(); }
};

class SeedWriter {
public:
  SeedWriter(GgmlType matrixType, uint32_t seed)
      : matrixType(matrixType), random(seed) {}

  /// A vector of norm weights (always f32, as llama.cpp writes them).
  void vector(GgufWriter &writer, const std::string &name, uint64_t length,
              float mean) {
    std::normal_distribution<float> normal(mean, 0.1f);
    std::vector<float> values(length);
    for (float &value : values)
      value = normal(random);
    writer.addTensorF32(name, {length}, values);
  }

  /// A `rows` x `columns` matrix of small values in the seed's type.
  void matrix(GgufWriter &writer, const std::string &name, uint64_t columns,
              uint64_t rows) {
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::string bytes;
    auto appendHalf = [&](float value) {
      uint16_t bits = floatToHalf(value);
      bytes.append(reinterpret_cast<const char *>(&bits), 2);
    };
    for (uint64_t index = 0; index < columns * rows; ++index) {
      float value = normal(random);
      switch (matrixType) {
      case GgmlType::F32:
        bytes.append(reinterpret_cast<const char *>(&value), 4);
        break;
      case GgmlType::F16:
        appendHalf(value);
        break;
      case GgmlType::Q8_0:
        // Block of 32: f16 scale, 32 signed bytes.
        if (index % 32 == 0)
          appendHalf(0.01f);
        bytes.push_back(
            char(int8_t(std::clamp(value * 100.0f, -127.f, 127.f))));
        break;
      case GgmlType::Q4_1:
        // Block of 32: f16 scale and minimum, 16 bytes of two nibbles.
        if (index % 32 == 0) {
          appendHalf(0.05f);
          appendHalf(-0.4f);
        }
        if (index % 32 < 16)
          bytes.push_back(char(random() & 0xff));
        break;
      default:
        break;
      }
    }
    writer.addTensor(name, matrixType, {columns, rows}, bytes);
  }

private:
  GgmlType matrixType;
  std::mt19937 random;
};

std::string makeSeed(const std::string &arch, GgmlType matrixType, bool tied,
                     SeedShape shape) {
  const uint64_t embeddingDim = shape.embeddingDim(),
                 feedForwardDim = shape.feedForwardDim();
  GgufWriter writer;
  writer.addString("general.architecture", arch);
  writer.addString("general.name", "fuzz-seed");
  writer.addUInt32(arch + ".block_count", 1);
  writer.addUInt32(arch + ".embedding_length", embeddingDim);
  writer.addUInt32(arch + ".feed_forward_length", feedForwardDim);
  writer.addUInt32(arch + ".attention.head_count", NumHeads);
  writer.addUInt32(arch + ".attention.head_count_kv", NumKvHeads);
  writer.addUInt32(arch + ".context_length", 64);
  writer.addFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.addFloat32(arch + ".rope.freq_base", 10000.0f);

  // The wider seeds draw from streams of their own; the 16-wide seeds keep
  // their bytes.
  SeedWriter weights(matrixType, 7u + uint32_t(matrixType) + (tied ? 100 : 0) +
                                     (shape.headDim == BaseHeadDim ? 0 : 1000));
  weights.matrix(writer, "token_embd.weight", embeddingDim, VocabSize);
  const uint64_t queryDim = NumHeads * shape.headDim,
                 kvDim = NumKvHeads * shape.headDim;
  weights.vector(writer, "blk.0.attn_norm.weight", embeddingDim, 1.0f);
  weights.matrix(writer, "blk.0.attn_q.weight", embeddingDim, queryDim);
  weights.matrix(writer, "blk.0.attn_k.weight", embeddingDim, kvDim);
  weights.matrix(writer, "blk.0.attn_v.weight", embeddingDim, kvDim);
  if (arch == "qwen2") {
    weights.vector(writer, "blk.0.attn_q.bias", queryDim, 0.0f);
    weights.vector(writer, "blk.0.attn_k.bias", kvDim, 0.0f);
    weights.vector(writer, "blk.0.attn_v.bias", kvDim, 0.0f);
  }
  weights.matrix(writer, "blk.0.attn_output.weight", queryDim, embeddingDim);
  weights.vector(writer, "blk.0.ffn_norm.weight", embeddingDim, 1.0f);
  weights.matrix(writer, "blk.0.ffn_gate.weight", embeddingDim, feedForwardDim);
  weights.matrix(writer, "blk.0.ffn_up.weight", embeddingDim, feedForwardDim);
  weights.matrix(writer, "blk.0.ffn_down.weight", feedForwardDim, embeddingDim);
  weights.vector(writer, "output_norm.weight", embeddingDim, 1.0f);
  if (!tied)
    weights.matrix(writer, "output.weight", embeddingDim, VocabSize);
  return writer.write();
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: make_model_seeds OUT_DIR\n";
    return 2;
  }
  struct Seed {
    const char *arch;
    GgmlType type;
    const char *typeName;
    bool tied;
    uint64_t headDim = BaseHeadDim;
  };
  const Seed seeds[] = {
      {"llama", GgmlType::F32, "f32", true},
      {"llama", GgmlType::F16, "f16", false},
      {"llama", GgmlType::Q4_1, "q4_1", true},
      {"llama", GgmlType::Q8_0, "q8_0", false},
      {"qwen2", GgmlType::F32, "f32", false},
      {"qwen2", GgmlType::Q8_0, "q8_0", true},
      {"llama", GgmlType::Q8_0, "q8_0", false, 32},
      {"llama", GgmlType::Q4_1, "q4_1", true, 32},
  };
  for (const Seed &seed : seeds) {
    llvm::SmallString<256> path(argv[1]);
    llvm::sys::path::append(path,
                            std::string("seed-") + seed.arch + "-" +
                                seed.typeName + (seed.tied ? "-tied" : "") +
                                (seed.headDim == BaseHeadDim
                                     ? ""
                                     : "-hd" + std::to_string(seed.headDim)) +
                                ".bin");
    std::error_code error;
    llvm::raw_fd_ostream out(path, error);
    if (error) {
      llvm::errs() << "make_model_seeds: " << path << ": " << error.message()
                   << "\n";
      return 1;
    }
    out << makeSeed(seed.arch, seed.type, seed.tied, SeedShape{seed.headDim});
  }
  return 0;
}
