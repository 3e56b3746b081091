//===- SpanModeOptions.cpp - --span-context and --span-recompute ----------===//

#include "tools/spanc/SpanModeOptions.h"

#include "tools/spanc/CommandLine.h"
#include "tools/spanc/DeviceOption.h"

#include <string>

namespace spanc::cli {

namespace po = boost::program_options;

void addSpanModeOptions(po::options_description &options) {
  const kv::SpanOptions defaults;
  options.add_options()                                                      //
      ("span-context",                                                       //
       po::value<std::string>()->default_value(                              //
           kv::spanContextName(defaults.context)),                           //
       "with --cache=span, what each span of a plus attends to besides "     //
       "itself: prefix (what precedes the plus in its call: BOS, the "       //
       "system turn, earlier messages; spans hit whenever a call repeats "   //
       "that prefix, in any order) or isolated (nothing: spans hit after "   //
       "any prefix, at a cost in accuracy)")                                 //
      ("span-recompute",                                                     //
       po::value<int64_t>()->default_value(defaults.recomputeBlocks),        //
       "with --cache=span, recompute the first N blocks of each span that "  //
       "did not see everything before it, in its call's context; the "       //
       "tail reads those rows, the cached span stays as it is (costs N "     //
       "blocks per span on a hit; 0: off)")                                  //
      ("span-recompute-end",                                                 //
       po::value<int64_t>()->default_value(defaults.recomputeEndBlocks),     //
       "with --cache=span, the same for the last N blocks of each such "     //
       "span (they read the span's kept blocks before them)")                //
      ("span-blend",                                                         //
       po::value<int64_t>()->default_value(defaults.blendPercent),           //
       "with --cache=span, selective recompute (CacheBlend-style): after "   //
       "the spans of a plus, recompute their first 2 layers in the call's "  //
       "context, then through every layer the N% of their tokens whose "     //
       "K/V moved most (and every token of the --span-recompute and "        //
       "--span-recompute-end blocks); the tail reads the blend, the "        //
       "cached spans stay as they are (0: off; 1..100)")                     //
      ("span-temperature",                                                   //
       po::value<float>()->default_value(defaults.temperature),              //
       "with --cache=span, span scaling (APE-style): what follows a plus "   //
       "reads its spans with scores divided by T (below 1 sharpens; "        //
       "0.1..4; 1: off)")                                                    //
      ("span-mass-scale",                                                    //
       po::value<float>()->default_value(defaults.massScale),                //
       "with --cache=span, span scaling: the log of the attention mass "     //
       "that what follows a plus gives its spans is multiplied by S "        //
       "before it is weighed against the prefix and the tail (0.1..4; 1: "   //
       "off)")                                                               //
      ("span-guided",                                                        //
       po::value<int64_t>()->default_value(defaults.guidedPercent),          //
       "with --cache=span, question-guided repair: after the spans of a "    //
       "plus, the question (the segment after the plus) runs once over "     //
       "them and records the attention each span block receives; the N% "    //
       "of span blocks that received most (and the --span-recompute and "    //
       "--span-recompute-end blocks) are recomputed through every layer in " //
       "the call's context, and the tail reads them; the cached spans stay " //
       "as they are (0: off; 1..100; 100 is full attention)")                //
      ("span-guided-layers",                                                 //
       po::value<std::string>()->default_value(                              //
           kv::repairLayersName(defaults.guidedLayers)),                     //
       "with --span-guided, the layers whose attention ranks the blocks: "   //
       "all, last or upper (the band [L/2, 3L/4))")                          //
      ("span-guided-granularity",                                            //
       po::value<std::string>()->default_value(                              //
           kv::repairGranularityName(defaults.guidedGranularity)),           //
       "with --span-guided, what is ranked and recomputed: block or token")  //
      ("span-guided-neighbours",                                             //
       po::value<int64_t>()->default_value(defaults.guidedNeighbours),       //
       "with --span-guided, also recompute N neighbouring blocks (tokens) "  //
       "on each side of every chosen one, inside its span (0..8)")           //
      ("span-mode",                                                          //
       po::value<std::string>(),                                             //
       "with --cache=span, the whole span mode by name, as the benchmarks "  //
       "name it (instead of the --span-* options above): prefix or "         //
       "isolated, then +recomputeN, +endN, +blendP, +guidedP (+last, "       //
       "+upper, +tokens, +nearN), +tempP, +massP; e.g. prefix+end1 (the "    //
       "default), prefix+guided20");
}

llvm::Expected<kv::SpanOptions>
readSpanModeOptions(const po::variables_map &values) {
  if (values.count("span-mode")) {
    for (const char *flag :
         {"span-context", "span-recompute", "span-recompute-end", "span-blend",
          "span-temperature", "span-mass-scale", "span-guided",
          "span-guided-layers", "span-guided-granularity",
          "span-guided-neighbours"})
      if (values.count(flag) && !values[flag].defaulted())
        return llvm::createStringError(
            std::errc::invalid_argument,
            "--span-mode and --%s: the mode names every setting; give one "
            "of them",
            flag);
    auto mode = kv::parseSpanMode(values["span-mode"].as<std::string>());
    if (!mode)
      return mode.takeError();
    return *mode;
  }
  kv::SpanOptions options;
  auto context = kv::parseSpanContext(values["span-context"].as<std::string>());
  if (!context)
    return context.takeError();
  options.context = *context;
  auto layers =
      kv::parseRepairLayers(values["span-guided-layers"].as<std::string>());
  if (!layers)
    return layers.takeError();
  options.guidedLayers = *layers;
  auto granularity = kv::parseRepairGranularity(
      values["span-guided-granularity"].as<std::string>());
  if (!granularity)
    return granularity.takeError();
  options.guidedGranularity = *granularity;
  // Counts are read signed, so that a negative one is reported as given.
  struct Count {
    const char *flag;
    uint32_t *target;
    const char *range;
  };
  for (const Count &count :
       {Count{"span-recompute", &options.recomputeBlocks,
              "must be in [0, 64] blocks"},
        Count{"span-recompute-end", &options.recomputeEndBlocks,
              "must be in [0, 64] blocks"},
        Count{"span-blend", &options.blendPercent, "a percentage, 0..100"},
        Count{"span-guided", &options.guidedPercent, "a percentage, 0..100"},
        Count{"span-guided-neighbours", &options.guidedNeighbours,
              "must be in [0, 8]"}}) {
    int64_t value = values[count.flag].as<int64_t>();
    if (value < 0 || value > 100000)
      return llvm::createStringError(
          std::errc::invalid_argument, "--%s %lld: %s", count.flag,
          static_cast<long long>(value), count.range);
    *count.target = uint32_t(value);
  }
  options.temperature = values["span-temperature"].as<float>();
  options.massScale = values["span-mass-scale"].as<float>();
  if (llvm::Error error = kv::checkSpanOptions(options))
    return error;
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

bool readExecutorChoices(const char *command, const po::variables_map &values,
                         sched::ExecutorOptions &options) {
  std::optional<backend::Device> device = readDeviceOption(command, values);
  if (!device)
    return false;
  options.device = *device;
  if (llvm::Error error =
          readCacheModeOptions(values, options.cacheMode,
                               options.relocationMode, options.spanOptions)) {
    reportError(command, llvm::toString(std::move(error)));
    return false;
  }
  return true;
}

} // namespace spanc::cli
