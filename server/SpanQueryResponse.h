//===- SpanQueryResponse.h - The answer to POST /v1/query -----------------===//
//
// A span program's answer (docs/SERVING.md): each query's
// results in order (a call's text, or literal text), each call's statistics
// and the usage, as one `span.query` object. Plain values in, JSON text
// out: no network, no engine.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_SPANQUERYRESPONSE_H
#define SPANC_SERVER_SPANQUERYRESPONSE_H

#include "plan/Plan.h"
#include "server/ResponseStream.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>

namespace spanc::server {

/// The body for `plan` once every call finished: `texts` holds each
/// call's output by id, `stream` each call's result.
std::string spanQueryAnswer(const plan::Plan &plan,
                            llvm::ArrayRef<std::string> texts,
                            const ResponseStream &stream,
                            const std::string &modelName);

} // namespace spanc::server

#endif // SPANC_SERVER_SPANQUERYRESPONSE_H
