//===- SpanModeOptions.h - --span-context and --span-recompute ------------===//
//
// The span accuracy modes (docs/ARCHITECTURE.md, "Span attention") as
// `run`, `compile --emit=plan` and `bench` spell them, declared once.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_SPANMODEOPTIONS_H
#define SPANC_TOOLS_SPANC_SPANMODEOPTIONS_H

#include "runtime/kv/SpanLayout.h"
#include "runtime/sched/Executor.h"

#include "llvm/Support/Error.h"

#include <boost/program_options.hpp>

namespace spanc::cli {

/// Adds --span-mode and the --span-* settings to `options`.
void addSpanModeOptions(boost::program_options::options_description &options);

/// Reads them back; fails with a message naming the option.
llvm::Expected<kv::SpanOptions>
readSpanModeOptions(const boost::program_options::variables_map &values);

/// Reads --cache, --relocation and the span modes, as `run` and `serve`
/// take them; fails with the first bad value's message.
llvm::Error
readCacheModeOptions(const boost::program_options::variables_map &values,
                     kv::CacheMode &cacheMode, kv::RelocationMode &relocation,
                     kv::SpanOptions &spanOptions);

/// Reads --device, --cache, --relocation and the span modes into
/// `options`, as `run` and `serve` take them; false after reporting the
/// first bad value as "spanc COMMAND: error: ...".
bool readExecutorChoices(const char *command,
                         const boost::program_options::variables_map &values,
                         sched::ExecutorOptions &options);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_SPANMODEOPTIONS_H
