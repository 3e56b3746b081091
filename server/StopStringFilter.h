//===- StopStringFilter.h - Text released to a client, stop strings cut ---===//
//
// The runner stops a call once its text ends with a stop string, so the
// text holds the stop string and streaming would have sent its first
// characters already. OpenAI clients get neither: this filter releases the
// streamed text only up to where a stop string could begin, cuts it at the
// first stop string, and never ends a release inside a UTF-8 character
// (byte-level tokens split them).
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_STOPSTRINGFILTER_H
#define SPANC_SERVER_STOPSTRINGFILTER_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace spanc::server {

class StopStringFilter {
public:
  explicit StopStringFilter(std::vector<std::string> stopStrings);

  /// Takes the next piece of generated text; returns what may be sent now.
  std::string push(llvm::StringRef piece);
  /// The generation ended: returns the rest (nothing after a stop string).
  std::string finish();
  /// Whether a stop string was found (the text was cut there).
  bool stopped() const { return hitStop; }

private:
  std::vector<std::string> stops;
  std::string held;
  bool hitStop = false;
};

} // namespace spanc::server

#endif // SPANC_SERVER_STOPSTRINGFILTER_H
