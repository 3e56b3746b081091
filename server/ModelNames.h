//===- ModelNames.h - The names requests may give the one model served ----===//
//
// `spanc serve` serves one model under one or more names, as vLLM's
// --served-model-name does: each is an id in /v1/models, and a request
// naming any of them is answered under the name it matched. A request's
// `model` matches a served name when the two are equal after ASCII case
// folding and after dropping one trailing ".gguf" from each: with a single
// model behind the server no two of these spellings can mean different
// models, while clients write the same model as its file name, its stem or
// in another case (spnl's `openai/NAME` sends NAME as the user typed it).
// Any other difference (a missing quantisation suffix, a hub prefix) is a
// different name: give it with --served-model-name.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_MODELNAMES_H
#define SPANC_SERVER_MODELNAMES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace spanc::server {

class ModelNames {
public:
  /// No name: every request's model is taken (a library user's default).
  ModelNames() = default;
  /// `names` in order, the first the primary; spellings that match an
  /// earlier name are dropped (they would list one model twice).
  explicit ModelNames(llvm::ArrayRef<std::string> names);

  /// The names of --served-model-name occurrences `flags`, each a
  /// comma-separated list (vLLM's space-separated list arrives as several
  /// occurrences); none: `fallback` (the model file's stem). An empty name
  /// is an error.
  static llvm::Expected<ModelNames> fromFlags(llvm::ArrayRef<std::string> flags,
                                              llvm::StringRef fallback);

  bool empty() const { return names.empty(); }
  /// The name answers carry when a request names no model, and the
  /// metrics' model_name label.
  const std::string &primary() const;
  llvm::ArrayRef<std::string> all() const { return names; }

  /// The served name `requested` matches (the rule above); null when none
  /// does. Empty names: `requested` itself is taken.
  const std::string *match(const std::string &requested) const;

  /// "'a'" or "'a', 'b'": what a 404 says the server serves.
  std::string describe() const;

private:
  std::vector<std::string> names;
};

} // namespace spanc::server

#endif // SPANC_SERVER_MODELNAMES_H
