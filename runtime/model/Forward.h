//===- Forward.h - The inputs and outputs of one forward step -------------===//
//
// A forward step runs a batch of sequences, each with its new tokens, their
// positions and its page list over the KV storage (docs/ARCHITECTURE.md,
// "The plan", page lists). These value types are what a scheduler hands a
// backend (runtime/backend/Backend.h) takes and lays out (StepLayout); they
// carry no kernel or storage type, so a backend of another device uses them
// as they are.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_MODEL_FORWARD_H
#define SPANC_RUNTIME_MODEL_FORWARD_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace spanc::model {

/// Which logits a sequence wants back.
enum class LogitsRequest { None, Last, All };

/// What a sequence's rows are, which picks their kernels. The choice is the
/// row's own, never the step's, so a row rounds the same whatever shares
/// its step (docs/ARCHITECTURE.md, "Numerics"): prompt rows take the packed
/// bf16/f32 GEMMs and, where the CPU has it, AMX attention; decode rows
/// multiply the 4/8-bit weights in place with int8 activations and keep
/// f32 attention products.
enum class RowKind {
  Auto,   ///< one new token: Decode; more: Prompt
  Prompt, ///< prompt tokens, however few (a short tail after a cache hit)
  Decode, ///< a generated token fed back
};

/// APE-style scaling of a sequence's attention to pages of parallel-encoded
/// context (docs/ARCHITECTURE.md, "Span attention"; kv::SpanOptions): their
/// scores are divided by `temperature` and the log of their softmax mass is
/// multiplied by `massScale` before it is weighed against the other pages'.
struct SpanScaling {
  float temperature = 1;
  float massScale = 1;
  bool isIdentity() const { return temperature == 1 && massScale == 1; }
};

/// One sequence of a forward step.
struct ForwardSequence {
  llvm::ArrayRef<int32_t> tokens;      ///< the new tokens
  llvm::ArrayRef<int32_t> positions;   ///< their RoPE positions
  llvm::ArrayRef<int32_t> blockIds;    ///< the page list, in logical order
  llvm::ArrayRef<int32_t> validTokens; ///< valid leading slots per page
  LogitsRequest logits = LogitsRequest::Last;
  RowKind rows = RowKind::Auto;
  /// Per page (empty: none), nonzero for a page of parallel-encoded context
  /// that spanScaling applies to.
  llvm::ArrayRef<uint8_t> spanPages = {};
  SpanScaling spanScaling = {};
  /// Optional (empty: none), one float per logical token of the page list:
  /// adds the attention each key receives from the sequence's new tokens
  /// (softmax probabilities, summed over those rows and every query head)
  /// at layers [massFirstLayer, massEndLayer). A question-guided repair's
  /// probe (docs/ARCHITECTURE.md, "Span attention").
  llvm::MutableArrayRef<float> keyMass = {};
  uint32_t massFirstLayer = 0, massEndLayer = 0;
  /// Optional (empty: the new tokens are the last tokens.size() logical
  /// tokens of the page list), one per new token: its logical index in the
  /// page list, strictly increasing. A token attends to the keys up to its
  /// index and its K/V go to that slot, so the compute runs of one request
  /// whose page lists are prefixes of one list (the recomputed block after
  /// each span, then the tail) run as one sequence and each row computes
  /// what it would in a sequence of its own (docs/ARCHITECTURE.md, "Span
  /// attention").
  llvm::ArrayRef<int32_t> queryIndices = {};
};

/// Whether a sequence's rows are decode rows (RowKind::Auto: one new token).
bool isDecodeSequence(const ForwardSequence &sequence);

/// What a backend checks a step's sequences against.
struct ForwardLimits {
  int64_t numBlocks = 0;
  int blockSize = 16;
  uint32_t vocabSize = 0;
  /// Positions the RoPE tables cover.
  int64_t numPositions = 0;
  /// K stored unrotated: queries and keys rotate at their logical index
  /// and the sequences' positions are ignored.
  bool ropeInKernel = true;
  /// Why span scaling (a sequence with span pages and a scaling other than
  /// the identity) is refused here; empty where it is supported.
  llvm::StringRef spanScalingRefusal = {};
  /// Why recording attention mass (ForwardSequence::keyMass) is refused
  /// here; empty where it is supported.
  llvm::StringRef keyMassRefusal = {};
  /// Why explicit query indices (ForwardSequence::queryIndices) are refused
  /// here; empty where they are supported.
  llvm::StringRef queryIndicesRefusal = {};
};

/// Checks sequence `index` of `batch` against `limits`, so every backend
/// refuses a malformed step with the same message before it touches the
/// cache ("forward: sequence N: ..."). On success `length` is the number
/// of logical tokens in the sequence's page list.
llvm::Error checkForwardSequence(llvm::ArrayRef<ForwardSequence> batch,
                                 size_t index, const ForwardLimits &limits,
                                 int64_t &length);

/// The logical index in its page list of new token `token` of a checked
/// sequence whose page list holds `length` tokens.
inline int32_t queryIndex(const ForwardSequence &sequence, int64_t length,
                          int64_t token) {
  return sequence.queryIndices.empty()
             ? int32_t(length - int64_t(sequence.tokens.size()) + token)
             : sequence.queryIndices[size_t(token)];
}

/// The RoPE position of new token `token` of a checked sequence whose page
/// list holds `length` tokens: its logical index under rope-in-kernel, else
/// the sequence's own.
inline int32_t ropePosition(const ForwardSequence &sequence, int64_t length,
                            int64_t token, bool ropeInKernel) {
  return ropeInKernel ? queryIndex(sequence, length, token)
                      : sequence.positions[size_t(token)];
}

/// What forward() returns: logits rows, vocabSize floats each, in sequence
/// order; sequence s owns rows [rowOffsets[s], rowOffsets[s+1]).
struct ForwardOutput {
  std::vector<float> logits;
  llvm::SmallVector<int64_t, 8> rowOffsets;
  int64_t vocabSize = 0;
  const float *row(int64_t index) const {
    return logits.data() + index * vocabSize;
  }
};

} // namespace spanc::model

#endif // SPANC_RUNTIME_MODEL_FORWARD_H
