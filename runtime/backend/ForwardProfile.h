//===- ForwardProfile.h - Where a backend's forward passes spent time -----===//
//
// Wall time per kind of op, summed over the passes a backend ran while its
// profile was on (Backend::setProfiling; `spanc bench engine --profile`,
// `spanc run --stats=detailed`, `spanc bench rag`'s hit breakdown). Each op
// is timed on the calling thread around its parallel region (in a decode
// step run in one region, on its master thread between barriers), so
// thread wake-ups and barriers count in the op they serve.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_FORWARDPROFILE_H
#define SPANC_RUNTIME_BACKEND_FORWARDPROFILE_H

#include "runtime/model/ModelConfig.h"

#include <cstdint>

namespace spanc::backend {

struct ForwardProfile {
  double embeddingSeconds = 0, normSeconds = 0, qkvSeconds = 0, ropeSeconds = 0,
         kvWriteSeconds = 0, attentionSeconds = 0, attentionOutputSeconds = 0,
         gateUpSeconds = 0, swiGluSeconds = 0, downSeconds = 0,
         residualSeconds = 0, outputHeadSeconds = 0;
  /// Checking and flattening each step (StepLayout), before any op.
  double layoutSeconds = 0;
  int64_t tokens = 0;
  /// Forward passes, and the layers they ran (a repair's selection pass
  /// runs fewer than all).
  int64_t passes = 0, layers = 0;
  /// CPU: the passes whose layers ran in one parallel region (a decode
  /// step of a few rows, runtime/backend/cpu/ForwardDecodeTeam.cpp).
  int64_t passesInOneRegion = 0;
  /// The work behind the times, summed over each pass's layers: token rows
  /// through the layers' weight multiplications, and query-key pairs each
  /// query row attends to (a row sees its causal limit + 1 keys of its
  /// page list). With ModelConfig's FLOPs per unit they give the GEMMs'
  /// and attention's FLOP rates (`spanc bench rag`, `spanc bench device`).
  int64_t tokenLayers = 0, attentionPairs = 0;
  /// Of those, the work a pass's last layer did not do for rows whose
  /// logits it does not return: their rows past the QKV projection (CPU:
  /// runtime/backend/cpu/ForwardPass.cpp, keepLogitRows) and their
  /// query-key pairs.
  int64_t kvOnlyRows = 0, kvOnlyPairs = 0;

  /// The FLOPs behind attentionSeconds and gemmSeconds(), at `config`'s
  /// FLOPs per query-key pair and per token row.
  double attentionFlops(const model::ModelConfig &config) const {
    return double(attentionPairs - kvOnlyPairs) *
           config.attentionFlopsPerPair();
  }
  double gemmFlops(const model::ModelConfig &config) const {
    return double(tokenLayers) * config.projectionFlopsPerLayer() -
           double(kvOnlyRows) * (config.projectionFlopsPerLayer() -
                                 config.queryKeyValueFlopsPerRow());
  }

  ForwardProfile &operator+=(const ForwardProfile &other);
  /// The ops' time (the layout not included).
  double total() const;
  /// The weight multiplications of the layers: QKV, attention output,
  /// gate|up and down.
  double gemmSeconds() const {
    return qkvSeconds + attentionOutputSeconds + gateUpSeconds + downSeconds;
  }
  /// The layers' other ops: norms, RoPE, the K/V write, SwiGLU, residuals.
  double otherLayerSeconds() const {
    return normSeconds + ropeSeconds + kvWriteSeconds + swiGluSeconds +
           residualSeconds;
  }
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_FORWARDPROFILE_H
