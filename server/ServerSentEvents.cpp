//===- ServerSentEvents.cpp - The framing of a streamed answer ------------===//

#include "server/ServerSentEvents.h"

#include <httplib.h>

namespace spanc::server {

std::string formatEvent(llvm::StringRef data) {
  return "data: " + data.str() + "\n\n";
}

bool writeEvent(httplib::DataSink &sink, llvm::StringRef data) {
  std::string event = formatEvent(data);
  return sink.write(event.data(), event.size());
}

bool writeDone(httplib::DataSink &sink) {
  if (!writeEvent(sink, "[DONE]"))
    return false;
  sink.done();
  return true;
}

} // namespace spanc::server
