//===- GemmOptions.h - --gemm-weights and --prompt-int8 -------------------===//
//
// How the prompt rows of a Q4_1/Q8_0 model multiply their weights.
// --gemm-weights: on hosts with native bf16 (AMX, AVX-512 BF16) the prompt
// GEMMs read the 4/8-bit weights decode reads, unpacked per call
// (AmxGemm.h, "Borrowed weights"), by default; `copy` keeps a bf16 copy of
// every projection instead: 2 bytes a weight more resident, for about the
// same prefill speed (bench/results/engine-amx.md). Both give the same
// bits. --prompt-int8: on hosts whose prompt GEMMs would be f32 (AVX-512
// without BF16, AVX2 without AVX-512), prompt rows of a Q4_1/Q8_0 model
// take int8 activations as decode rows do, by default (model::
// ModelOptions::quantizedPrompt); `off` keeps them on the f32 GEMMs
// (slower, an f32 copy of the weights on AVX-512; other bits).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_GEMMOPTIONS_H
#define SPANC_TOOLS_SPANC_GEMMOPTIONS_H

#include <boost/program_options.hpp>

#include <optional>

namespace spanc::cli {

/// What --gemm-weights and --prompt-int8 ask for.
struct GemmChoices {
  bool weightCopy = false;     ///< ModelOptions::gemmWeightCopy
  bool quantizedPrompt = true; ///< ModelOptions::quantizedPrompt
};

/// Adds --gemm-weights (borrowed | copy) and --prompt-int8 (auto | off),
/// with their help.
void addGemmOptions(boost::program_options::options_description &options);

/// The choices; nullopt after reporting a bad value as "spanc COMMAND:
/// error: ...".
std::optional<GemmChoices>
readGemmOptions(const char *command,
                const boost::program_options::variables_map &values);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_GEMMOPTIONS_H
