//===- KvEventsOption.h - spanc serve's --kv-events options ---------------===//
//
// The options of the KV event publisher (server/KvEventPublisher.h): where
// it binds, its replay socket, topic and bounds. Off unless --kv-events is
// given.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_TOOLS_SPANC_KVEVENTSOPTION_H
#define SPANC_TOOLS_SPANC_KVEVENTSOPTION_H

#include "server/KvEventPublisher.h"

#include <boost/program_options.hpp>

#include <optional>

namespace spanc::cli {

void addKvEventsOptions(boost::program_options::options_description &options);

/// The publisher's options when --kv-events was given; `enabled` false
/// when it was not. False (reported) when one is malformed or out of
/// range, so the server stops before loading the model.
bool readKvEventsOptions(const boost::program_options::variables_map &values,
                         unsigned blockSize, server::KvEventOptions &options,
                         bool &enabled);

} // namespace spanc::cli

#endif // SPANC_TOOLS_SPANC_KVEVENTSOPTION_H
