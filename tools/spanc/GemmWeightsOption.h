//===- GemmWeightsOption.h - --gemm-weights: borrowed 4-bit or a bf16 copy
//-===//
//
// On AMX hosts the prompt GEMMs of a Q4_1/Q8_0 model read the 4/8-bit
// weights decode reads, unpacked per call (AmxGemm.h, "Borrowed weights"),
// by default; `--gemm-weights=copy` keeps a bf16 copy of every projection
// instead: 2 bytes a weight more resident, for about the same prefill
// speed since the GEMMs split their rows between threads (within a few
// percent either way: bench/results/engine-amx.md). Both give the same
// bits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_GEMMWEIGHTSOPTION_H
#define SPANC_TOOLS_SPANC_GEMMWEIGHTSOPTION_H

#include <boost/program_options.hpp>

#include <optional>

namespace spanc::cli {

/// Adds --gemm-weights (borrowed | copy), with its help.
void addGemmWeightsOption(boost::program_options::options_description &options);

/// Whether --gemm-weights asks for the bf16 copy (ModelOptions::
/// gemmWeightCopy); nullopt after reporting any other value as "spanc
/// COMMAND: error: ...".
std::optional<bool>
readGemmWeightsOption(const char *command,
                      const boost::program_options::variables_map &values);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_GEMMWEIGHTSOPTION_H
