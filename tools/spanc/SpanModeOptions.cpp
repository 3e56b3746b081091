//===- SpanModeOptions.cpp - --span-context and --span-recompute ----------===//

#include "tools/spanc/SpanModeOptions.h"

#include <string>

namespace spanc::cli {

namespace po = boost::program_options;

namespace {
/// Longer heads cost more than a small span saves; 64 blocks is 1 024
/// tokens at the default block size.
constexpr unsigned kMaxRecomputeBlocks = 64;
} // namespace

void addSpanModeOptions(po::options_description &options) {
  const kv::SpanOptions defaults;
  options.add_options()                                                     //
      ("span-context",                                                      //
       po::value<std::string>()->default_value(                             //
           kv::spanContextName(defaults.context)),                          //
       "with --cache=span, what each span of a plus attends to besides "    //
       "itself: prefix (what precedes the plus in its call: BOS, the "      //
       "system turn, earlier messages; spans hit whenever a call repeats "  //
       "that prefix, in any order) or isolated (nothing: spans hit after "  //
       "any prefix, at a cost in accuracy)")                                //
      ("span-recompute",                                                    //
       po::value<int64_t>()->default_value(defaults.recomputeBlocks),       //
       "with --cache=span, recompute the first N blocks of each span that " //
       "did not see everything before it, in its call's context; the "      //
       "tail reads those rows, the cached span stays as it is (costs N "    //
       "blocks per span on a hit; 0: off)")                                 //
      ("span-recompute-end",                                                //
       po::value<int64_t>()->default_value(defaults.recomputeEndBlocks),    //
       "with --cache=span, the same for the last N blocks of each such "    //
       "span (they read the span's kept blocks before them)")               //
      ("span-blend",                                                        //
       po::value<int64_t>()->default_value(defaults.blendPercent),          //
       "with --cache=span, selective recompute (CacheBlend-style): after "  //
       "the spans of a plus, recompute their first 2 layers in the call's " //
       "context, then through every layer the N% of their tokens whose "    //
       "K/V moved most (and every token of the --span-recompute and "       //
       "--span-recompute-end blocks); the tail reads the blend, the "       //
       "cached spans stay as they are (0: off; 1..100)")                    //
      ("span-temperature",                                                  //
       po::value<float>()->default_value(defaults.temperature),             //
       "with --cache=span, span scaling (APE-style): what follows a plus "  //
       "reads its spans with scores divided by T (below 1 sharpens; "       //
       "0.1..4; 1: off)")                                                   //
      ("span-mass-scale",                                                   //
       po::value<float>()->default_value(defaults.massScale),               //
       "with --cache=span, span scaling: the log of the attention mass "    //
       "that what follows a plus gives its spans is multiplied by S "       //
       "before it is weighed against the prefix and the tail (0.1..4; 1: "  //
       "off)");
}

llvm::Expected<kv::SpanOptions>
readSpanModeOptions(const po::variables_map &values) {
  kv::SpanOptions options;
  auto context = kv::parseSpanContext(values["span-context"].as<std::string>());
  if (!context)
    return context.takeError();
  options.context = *context;
  // Read signed, so that a negative count is reported as given.
  int64_t recompute = values["span-recompute"].as<int64_t>();
  int64_t recomputeEnd = values["span-recompute-end"].as<int64_t>();
  int64_t blend = values["span-blend"].as<int64_t>();
  if (blend < 0 || blend > 100)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "--span-blend %lld: a percentage, 0..100",
                                   static_cast<long long>(blend));
  options.blendPercent = unsigned(blend);
  for (auto [name, target] :
       {std::make_pair("--span-temperature", &options.temperature),
        std::make_pair("--span-mass-scale", &options.massScale)}) {
    float value = values[name + 2].as<float>();
    // Also refuses NaN.
    if (!(value >= 0.1f && value <= 4.0f))
      return llvm::createStringError(std::errc::invalid_argument,
                                     "%s %g: must be in [0.1, 4]", name,
                                     double(value));
    *target = value;
  }
  for (auto [name, value] :
       {std::make_pair("--span-recompute", recompute),
        std::make_pair("--span-recompute-end", recomputeEnd)})
    if (value < 0 || value > kMaxRecomputeBlocks)
      return llvm::createStringError(
          std::errc::invalid_argument, "%s %lld: must be in [0, %u] blocks",
          name, static_cast<long long>(value), kMaxRecomputeBlocks);
  options.recomputeBlocks = unsigned(recompute);
  options.recomputeEndBlocks = unsigned(recomputeEnd);
  return options;
}

llvm::Error readCacheModeOptions(const po::variables_map &values,
                                 kv::CacheMode &cacheMode,
                                 kv::RelocationMode &relocation,
                                 kv::SpanOptions &spanOptions) {
  auto parsedCache = kv::parseCacheMode(values["cache"].as<std::string>());
  if (!parsedCache)
    return parsedCache.takeError();
  auto parsedRelocation =
      kv::parseRelocationMode(values["relocation"].as<std::string>());
  if (!parsedRelocation)
    return parsedRelocation.takeError();
  auto parsedSpan = readSpanModeOptions(values);
  if (!parsedSpan)
    return parsedSpan.takeError();
  cacheMode = *parsedCache;
  relocation = *parsedRelocation;
  spanOptions = *parsedSpan;
  return llvm::Error::success();
}

} // namespace spanc::cli
