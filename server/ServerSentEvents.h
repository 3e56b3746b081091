//===- ServerSentEvents.h - The framing of a streamed answer --------------===//
//
// A streamed answer is a text/event-stream body of `data: JSON` events,
// each ended by a blank line, and a last `data: [DONE]` (OpenAI's, vLLM's
// and llama.cpp's framing). Only the framing lives here; what an event
// holds is OpenAiResponse's or SpnlExecute's.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_SERVERSENTEVENTS_H
#define SPANC_SERVER_SERVERSENTEVENTS_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace httplib {
class DataSink;
} // namespace httplib

namespace spanc::server {

/// One event's bytes: "data: " DATA "\n\n".
std::string formatEvent(llvm::StringRef data);

/// Writes one event as one HTTP chunk (older spnl clients parse each chunk
/// as one event); false when the client is gone.
bool writeEvent(httplib::DataSink &sink, llvm::StringRef data);

/// Writes `data: [DONE]` and ends the body; false when the client is gone.
bool writeDone(httplib::DataSink &sink);

} // namespace spanc::server

#endif // SPANC_SERVER_SERVERSENTEVENTS_H
