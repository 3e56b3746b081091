//===- RelocationExecutor.cpp - Applies relocation plans to KvStorage -----===//

#include "runtime/backend/cpu/RelocationExecutor.h"

#include <algorithm>
#include <cmath>

namespace spanc::backend {

std::vector<double> relocationFrequencies(const cpu::RopeConfig &config) {
  // The same formula as cpu::ropeAngles, with the position factored out.
  const int half = config.rotaryDim / 2;
  const double frequencyScale = config.scaling == cpu::RopeScaling::None
                                    ? 1.0
                                    : 1.0 / std::max(1.0f, config.factor);
  double low = 0, high = 0, extFactor = 0;
  if (config.scaling == cpu::RopeScaling::Yarn) {
    extFactor = config.yarnExtFactor;
    const int context =
        config.originalContext > 0 ? config.originalContext : 4096;
    auto correctionDim = [&](double numRotations) {
      return config.rotaryDim *
             std::log(context / (numRotations * 2.0 * M_PI)) /
             (2.0 * std::log(double(config.theta)));
    };
    low = std::max(0.0, std::floor(correctionDim(config.yarnBetaFast)));
    high = std::min(double(config.rotaryDim - 1),
                    std::ceil(correctionDim(config.yarnBetaSlow)));
  }
  std::vector<double> frequencies(static_cast<size_t>(half));
  for (int pair = 0; pair < half; ++pair) {
    double extrapolated =
        std::pow(double(config.theta), -2.0 * pair / config.rotaryDim);
    if (!config.freqFactors.empty())
      extrapolated /= config.freqFactors[size_t(pair)];
    double frequency = extrapolated * frequencyScale;
    if (extFactor != 0) {
      double ramp = (pair - low) / std::max(0.001, high - low);
      double mix = (1.0 - std::clamp(ramp, 0.0, 1.0)) * extFactor;
      frequency = frequency * (1.0 - mix) + extrapolated * mix;
    }
    frequencies[size_t(pair)] = frequency;
  }
  return frequencies;
}

RelocationExecutor::RelocationExecutor(KvStorage &storage,
                                       const cpu::RopeConfig &config)
    : frequencies_(relocationFrequencies(config)) {
  const KvStorageConfig &shape = storage.config();
  layout_.numLayers = shape.numLayers;
  layout_.numKvHeads = shape.numKvHeads;
  layout_.headDim = shape.headDim;
  layout_.blockSize = shape.blockSize;
  layout_.blockStride = storage.blockStride();
  layout_.headStride = storage.headStride();
  layout_.tokenStride = KvStorage::keySlotStride();
  layout_.dimStride = storage.keyDimStride();
  layout_.precision = storage.precision();
  rotation_.pairing = config.order == cpu::RopeOrder::NeoX
                          ? cpu::RopePairing::NeoX
                          : cpu::RopePairing::Normal;
  rotation_.rotaryDim = config.rotaryDim;
  rotation_.frequencies = frequencies_.data();
  for (int layer = 0; layer < shape.numLayers; ++layer) {
    keyLayers_.push_back(storage.keyData(layer, 0, 0));
    valueLayers_.push_back(storage.valueData(layer, 0, 0));
  }
}

void RelocationExecutor::apply(llvm::ArrayRef<kv::RelocationOp> batch) {
  ops_.clear();
  for (const kv::RelocationOp &op : batch)
    ops_.push_back(cpu::RelocationOp{op.source, op.destination, op.delta});
  cpu::relocateBlocks(layout_, rotation_, keyLayers_.data(),
                      valueLayers_.data(), ops_);
}

void RelocationExecutor::apply(const kv::RelocationPlan &plan) {
  for (const auto &batch : plan.batches)
    apply(batch);
}

void RelocationExecutor::prepare(const kv::DecodeSlot &slot) {
  if (slot.copy)
    apply(*slot.copy);
}

} // namespace spanc::backend
