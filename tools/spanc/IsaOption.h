//===- IsaOption.h - --isa: cap the instruction set the kernels use -------===//
//
// `run`, `generate`, `bench` and `serve` take --isa=LEVEL (or SPANC_ISA in
// the environment) to run every kernel at or below one instruction-set
// level: scalar, avx2, avx512, avx512bf16 or amx (runtime/kernels/cpu/
// CpuFeatures.h; docs/ARCHITECTURE.md, "Kernel paths"). A level above this
// CPU's runs at the CPU's.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_ISAOPTION_H
#define SPANC_TOOLS_SPANC_ISAOPTION_H

#include <boost/program_options.hpp>

namespace spanc::cli {

/// Adds --isa, with the levels and this CPU's in the help.
void addIsaOption(boost::program_options::options_description &options);

/// Applies --isa (else checks SPANC_ISA); returns false after reporting an
/// unknown level as "spanc COMMAND: error: ...". Call before any kernel.
bool applyIsaOption(const char *command,
                    const boost::program_options::variables_map &values);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_ISAOPTION_H
