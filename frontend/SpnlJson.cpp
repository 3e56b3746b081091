//===- SpnlJson.cpp - Import IBM spnl's JSON query form into span IR ------===//

#include "frontend/SpnlJson.h"

#include "frontend/JsonSource.h"
#include "frontend/OptionConversion.h"
#include "support/JsonDepth.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

namespace spanc::frontend {

namespace {

/// Nesting limit for the recursive import: the JSON's own (checked before
/// the document is built, support/JsonDepth.h), so the walk over it, which
/// is recursive, stays within it too.
constexpr unsigned kMaxDepth = support::kMaxJsonDepth;

/// What lowering a node gave: an op, nothing (a dropped `print`), or an
/// error (already reported).
struct Lowered {
  ir::Op *op = nullptr;
  bool ok = true;
  static Lowered failure() { return {nullptr, false}; }
};

class Importer {
public:
  Importer(unsigned bufferId, ir::DiagnosticEngine &diagnostics,
           const SpnlImportOptions &options)
      : bufferId(bufferId), diagnostics(diagnostics), options(options) {}

  std::unique_ptr<ir::Module> run() {
    unsigned errorsBefore = diagnostics.getNumErrors();
    std::unique_ptr<JsonSource> parsed =
        JsonSource::parse(bufferId, diagnostics);
    if (!parsed)
      return nullptr;
    source = parsed.get();
    const Json &document = source->getDocument();

    auto module = std::make_unique<ir::Module>();
    std::string name = llvm::sys::path::stem(diagnostics.getSourceMgr()
                                                 .getMemoryBuffer(bufferId)
                                                 ->getBufferIdentifier())
                           .str();
    if (name.empty() || name == "-")
      name = "query";
    ir::Query *query = module->addQuery(name, locate(document));
    builder.setInsertionPointToEnd(query);
    Lowered root = lowerNode(document, "", 0);
    if (root.ok) {
      ir::Op *result = root.op;
      if (!result) {
        builder.setLoc(query->getLoc());
        result = builder.createCross({});
      }
      builder.setLoc(query->getLoc());
      builder.createYield(result);
    }
    if (diagnostics.getNumErrors() != errorsBefore)
      return nullptr;
    return module;
  }

private:
  ir::Location locate(const Json &node) { return source->locate(node); }

  Lowered error(const Json &node, const std::string &path,
                const llvm::Twine &message) {
    diagnostics.error(locate(node),
                      message + " (at " + (path.empty() ? "/" : path) + ")");
    return Lowered::failure();
  }

  ir::Op *create(const Json &node, ir::OpKind kind,
                 llvm::ArrayRef<ir::Op *> operands,
                 llvm::ArrayRef<ir::NamedAttribute> attributes = {},
                 llvm::StringRef text = {}) {
    builder.setLoc(locate(node));
    return builder.create(kind, operands, attributes, text);
  }

  Lowered lowerList(const Json &list, const std::string &path, unsigned depth,
                    ir::OpKind kind, const Json &at) {
    if (!list.is_array())
      return error(at, path,
                   llvm::Twine("expected an array of nodes, found ") +
                       describeJsonKind(list));
    llvm::SmallVector<ir::Op *, 8> children;
    bool ok = true;
    for (size_t i = 0; i < list.size(); ++i) {
      Lowered child =
          lowerNode(list[i], path + "/" + std::to_string(i), depth + 1, &list);
      ok &= child.ok;
      if (child.op)
        children.push_back(child.op);
    }
    if (!ok)
      return Lowered::failure();
    return {create(at, kind, children)};
  }

  /// Lowers `node`; `parent` locates a node that is not an object or an
  /// array (those have no offset of their own).
  Lowered lowerNode(const Json &node, const std::string &path, unsigned depth,
                    const Json *parent = nullptr) {
    if (depth > kMaxDepth)
      return error(node, path,
                   "nesting deeper than " + llvm::Twine(kMaxDepth) +
                       " levels is not supported");
    if (node.is_array())
      return lowerList(node, path, depth, ir::OpKind::Cross, node);
    if (!node.is_object())
      return error(parent && !source->isLocated(node) ? *parent : node, path,
                   llvm::Twine("expected a query node (an object such as "
                               "{\"user\": \"...\"}), found ") +
                       describeJsonKind(node));
    if (node.size() != 1) {
      std::string keys;
      for (const auto &item : node.items())
        keys += (keys.empty() ? "" : ", ") + item.key();
      return error(node, path,
                   "a query node has exactly one key (its kind), found " +
                       llvm::Twine(node.size()) +
                       (keys.empty() ? "" : ": " + keys));
    }
    const std::string &kind = node.begin().key();
    const Json &body = node.begin().value();
    std::string bodyPath = path + "/" + pointerSegment(kind);

    if (kind == "user" || kind == "system" || kind == "assistant") {
      if (!body.is_string())
        return error(node, bodyPath,
                     "'" + kind + "' takes a string, found " +
                         describeJsonKind(body));
      ir::OpKind opKind = kind == "user"     ? ir::OpKind::User
                          : kind == "system" ? ir::OpKind::System
                                             : ir::OpKind::Assistant;
      return {create(node, opKind, {}, {}, body.get<std::string>())};
    }
    if (kind == "print") {
      if (!body.is_string())
        return error(node, bodyPath,
                     llvm::Twine("'print' takes a string, found ") +
                         describeJsonKind(body));
      diagnostics.note(locate(node), "'print' is dropped from the model "
                                     "input (at " +
                                         bodyPath + ")");
      return {};
    }
    if (kind == "plus")
      return lowerList(body, bodyPath, depth, ir::OpKind::Plus, node);
    if (kind == "cross")
      return lowerList(body, bodyPath, depth, ir::OpKind::Cross, node);
    // Inside a model's input spnl's seq is its list of messages in order,
    // which is what cross means here (docs/ARCHITECTURE.md, "spnl
    // queries"); elsewhere it orders execution.
    if (kind == "seq")
      return lowerList(body, bodyPath, depth,
                       inModelInput ? ir::OpKind::Cross : ir::OpKind::Seq,
                       node);
    if (kind == "par")
      return lowerList(body, bodyPath, depth, ir::OpKind::Par, node);
    if (kind == "g")
      return lowerGenerate(body, bodyPath, depth, node);
    // spnl's bulk forms: {"repeat": R}, and {"Repeat": R} / {"Map": M}
    // (its untagged Bulk enum), also wrapped as {"bulk": ...}.
    if (kind == "repeat" || kind == "Repeat")
      return lowerRepeat(body, bodyPath, depth, node);
    if (kind == "map" || kind == "Map")
      return lowerMap(body, bodyPath, node);
    if (kind == "bulk")
      return lowerBulk(body, bodyPath, depth, node);
    if (kind == "zip")
      return lowerZip(body, bodyPath, depth, node);
    if (kind == "augment")
      return lowerAugment(body, bodyPath, depth, node);
    if (kind == "monad") {
      Lowered inner = lowerNode(body, bodyPath, depth + 1, &node);
      if (!inner.ok || !inner.op)
        return inner;
      return {create(node, ir::OpKind::Monad, {inner.op})};
    }
    return error(node, path,
                 "unknown key '" + kind +
                     "'; a query node is one of g, plus, cross, seq, par, "
                     "zip, repeat, map, bulk, augment, user, system, "
                     "assistant, print, monad");
  }

  /// Converts generate options (model, max_tokens, temperature, ...) of
  /// `object` into attributes, skipping the keys in `skip`.
  bool lowerOptions(const Json &object, const std::string &path,
                    llvm::ArrayRef<const char *> skip,
                    llvm::SmallVectorImpl<ir::NamedAttribute> &result) {
    const ir::OpInfo &info = ir::getOpInfo(ir::OpKind::Gen);
    bool ok = true;
    for (const auto &item : object.items()) {
      const std::string &key = item.key();
      if (llvm::is_contained(skip, key))
        continue;
      const Json &value = item.value();
      std::string keyPath = path + "/" + pointerSegment(key);
      const ir::AttrSpec *spec = info.findAttribute(key);
      if (!spec || key == "reduce") {
        std::string known;
        for (const char *name : skip)
          known += std::string(known.empty() ? "" : ", ") + name;
        for (const char *name : {"model", "max_tokens", "temperature", "top_p",
                                 "top_k", "seed", "stop"})
          known += std::string(", ") + name;
        error(object, keyPath,
              "unknown key '" + key + "'; expected one of " + known);
        ok = false;
        continue;
      }
      std::optional<ir::Attribute> attr =
          lowerOptionValue(object, key, value, keyPath, *spec);
      if (!attr) {
        ok = false;
        continue;
      }
      // spnl writes max_tokens = 0 (its default) for "as many as the
      // server allows": left out, as when absent, for the compiler's
      // default (codegen::LoweringLimits::defaultMaxTokens).
      if (key == "max_tokens" && attr->getInt() == 0)
        continue;
      result.push_back({key, std::move(*attr)});
    }
    return ok;
  }

  /// `value`, given for option `key` of `object`, as attribute `spec`, or
  /// nothing after an error at `object` (convertOption's words and the
  /// option's path).
  std::optional<ir::Attribute> lowerOptionValue(const Json &object,
                                                const std::string &key,
                                                const Json &value,
                                                const std::string &keyPath,
                                                const ir::AttrSpec &spec) {
    ir::AttrSpec asWritten = spec;
    std::optional<ir::Attribute> written;
    if (value.is_string()) {
      written = ir::Attribute(value.get<std::string>());
    } else if (value.is_number_unsigned() &&
               value.get<uint64_t>() > uint64_t(INT64_MAX)) {
      // Past every integer the IR holds: checked as the number it is,
      // which every integer option's range excludes (they end below 2^63).
      written = ir::Attribute(value.get<double>());
      if (spec.type == ir::AttrType::Int)
        asWritten.type = ir::AttrType::Float;
    } else if (value.is_number_integer()) {
      written = ir::Attribute(value.get<int64_t>());
    } else if (value.is_number()) {
      written = ir::Attribute(value.get<double>());
    }
    if (!written) {
      error(object, keyPath,
            "'" + key + "' takes " + ir::describeAttrType(spec.type) +
                ", not " + describeJsonKind(value));
      return std::nullopt;
    }
    llvm::Expected<ir::Attribute> converted =
        convertOption(asWritten, std::move(*written));
    if (!converted) {
      error(object, keyPath,
            "'" + key + "' " + llvm::toString(converted.takeError()));
      return std::nullopt;
    }
    return std::move(*converted);
  }

  Lowered lowerGenerate(const Json &body, const std::string &path,
                        unsigned depth, const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'g' takes an object with 'input', found ") +
                       describeJsonKind(body));
    llvm::SmallVector<ir::NamedAttribute, 4> options;
    bool ok = lowerOptions(body, path, {"input"}, options);
    auto input = body.find("input");
    if (input == body.end())
      return error(node, path, "'g' needs an 'input'");
    bool wasInModelInput = inModelInput;
    inModelInput = true;
    Lowered inner = lowerNode(*input, path + "/input", depth + 1, &body);
    inModelInput = wasInModelInput;
    if (!ok || !inner.ok)
      return Lowered::failure();
    ir::Op *operand = inner.op;
    if (!operand)
      operand = create(node, ir::OpKind::Cross, {});
    return {create(node, ir::OpKind::Gen, {operand}, options)};
  }

  Lowered lowerRepeat(const Json &body, const std::string &path, unsigned depth,
                      const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'repeat' takes an object with 'n' and "
                               "'query' (or 'g'), found ") +
                       describeJsonKind(body));
    std::optional<int64_t> n;
    Lowered inner = Lowered::failure();
    bool ok = true, haveBody = false;
    for (const auto &item : body.items()) {
      const std::string &key = item.key();
      std::string keyPath = path + "/" + pointerSegment(key);
      if (key == "n") {
        const ir::AttrSpec &spec =
            *ir::getOpInfo(ir::OpKind::Repeat).findAttribute("n");
        if (std::optional<ir::Attribute> value =
                lowerOptionValue(body, key, item.value(), keyPath, spec))
          n = value->getInt();
        else
          ok = false;
      } else if (key == "query" || key == "g" || key == "generate") {
        if (haveBody) {
          error(body, keyPath, "'repeat' takes one of 'query', 'g'");
          ok = false;
          continue;
        }
        haveBody = true;
        inner = key == "query"
                    ? lowerNode(item.value(), keyPath, depth + 1, &body)
                    : lowerGenerate(item.value(), keyPath, depth + 1, body);
      } else {
        error(body, keyPath,
              "unknown key '" + key + "'; 'repeat' takes n and query (or g)");
        ok = false;
      }
    }
    if (!n && ok) {
      error(node, path, "'repeat' needs 'n'");
      ok = false;
    }
    if (!haveBody) {
      error(node, path, "'repeat' needs a 'query' (or 'g', 'generate')");
      ok = false;
    }
    if (!ok || !inner.ok)
      return Lowered::failure();
    if (!inner.op)
      return {};
    return {create(node, ir::OpKind::Repeat, {inner.op},
                   {{"n", ir::Attribute(*n)}})};
  }

  /// {"bulk": B}: B is {"repeat"|"Repeat": R}, {"map"|"Map": M}, or a
  /// repeat's own body {"n", "generate"} (spnl's first bulk form).
  Lowered lowerBulk(const Json &body, const std::string &path, unsigned depth,
                    const Json &node) {
    if (body.is_object() && body.size() == 1) {
      const std::string &key = body.begin().key();
      std::string keyPath = path + "/" + pointerSegment(key);
      if (key == "repeat" || key == "Repeat")
        return lowerRepeat(body.begin().value(), keyPath, depth + 1, body);
      if (key == "map" || key == "Map")
        return lowerMap(body.begin().value(), keyPath, body);
    }
    if (body.is_object() && body.contains("n"))
      return lowerRepeat(body, path, depth, node);
    return error(node, path,
                 llvm::Twine("'bulk' takes an object {\"repeat\": ...} or "
                             "{\"map\": ...}, found ") +
                     (body.is_object() ? "an object without either"
                                       : describeJsonKind(body)));
  }

  /// {"zip": {"first": A, "second": B}}: A before every element of B, in a
  /// join of B's kind (B's own elements when B is a join, else B alone, in
  /// order); when A is a plus, each element joins A's spans instead, as
  /// one plus. This is what spnl's executor makes of a zip.
  Lowered lowerZip(const Json &body, const std::string &path, unsigned depth,
                   const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'zip' takes an object with 'first' and "
                               "'second', found ") +
                       describeJsonKind(body));
    const Json *first = nullptr, *second = nullptr;
    bool ok = true;
    for (const auto &item : body.items()) {
      if (item.key() == "first") {
        first = &item.value();
      } else if (item.key() == "second") {
        second = &item.value();
      } else {
        error(body, path + "/" + pointerSegment(item.key()),
              "unknown key '" + item.key() + "'; 'zip' takes first and second");
        ok = false;
      }
    }
    if (!first || !second)
      return error(node, path,
                   llvm::Twine("'zip' needs '") + (first ? "second" : "first") +
                       "'");
    Lowered a = lowerNode(*first, path + "/first", depth + 1, &body);
    Lowered b = lowerNode(*second, path + "/second", depth + 1, &body);
    if (!ok || !a.ok || !b.ok)
      return Lowered::failure();
    if (!a.op || !b.op)
      return a.op ? a : b;
    bool secondIsList = b.op->isJoin();
    ir::OpKind kind = secondIsList   ? b.op->getKind()
                      : inModelInput ? ir::OpKind::Cross
                                     : ir::OpKind::Seq;
    llvm::SmallVector<ir::Op *, 8> items;
    if (secondIsList)
      items.append(b.op->operandValues().begin(), b.op->operandValues().end());
    else
      items.push_back(b.op);
    llvm::SmallVector<ir::Op *, 16> zipped;
    for (ir::Op *item : items) {
      if (a.op->getKind() == ir::OpKind::Plus) {
        llvm::SmallVector<ir::Op *, 8> spans(a.op->operandValues().begin(),
                                             a.op->operandValues().end());
        spans.push_back(item);
        zipped.push_back(create(node, ir::OpKind::Plus, spans));
      } else {
        zipped.push_back(a.op);
        zipped.push_back(item);
      }
    }
    // A plus needs a span; a zip over nothing is an empty one.
    ir::Op *result = create(
        node,
        zipped.empty() && kind == ir::OpKind::Plus ? ir::OpKind::Cross : kind,
        zipped);
    if (secondIsList && b.op->useEmpty())
      b.op->erase();
    if (a.op->useEmpty())
      a.op->erase();
    return {result};
  }

  /// Appends the text of the messages `node` holds (a message, a list or a
  /// join of them) to `text`; false after reporting anything else.
  bool collectMessageText(const Json &node, const std::string &path,
                          const Json &parent, unsigned depth,
                          std::string &text) {
    if (depth > kMaxDepth) {
      error(parent, path,
            "nesting deeper than " + llvm::Twine(kMaxDepth) +
                " levels is not supported");
      return false;
    }
    const Json *list = node.is_array() ? &node : nullptr;
    std::string listPath = path;
    if (node.is_object() && node.size() == 1) {
      const std::string &key = node.begin().key();
      const Json &value = node.begin().value();
      if ((key == "user" || key == "system" || key == "assistant") &&
          value.is_string()) {
        if (!text.empty())
          text += "\n";
        text += value.get<std::string>();
        return true;
      }
      if ((key == "cross" || key == "plus" || key == "seq") &&
          value.is_array()) {
        list = &value;
        listPath += "/" + key;
      }
    }
    if (!list) {
      error(source->isLocated(node) ? node : parent, path,
            "'augment' takes messages as its 'body' (their text is what it "
            "retrieves for), found " +
                llvm::Twine(node.is_object() && node.size() == 1
                                ? "'" + node.begin().key() + "'"
                                : std::string(describeJsonKind(node))));
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < list->size(); ++i)
      ok &= collectMessageText((*list)[i], listPath + "/" + std::to_string(i),
                               *list, depth + 1, text);
    return ok;
  }

  /// {"augment": {"embedding_model": E, "body": Q, "doc": [NAME, DOC]}}:
  /// the fragments of corpus NAME most relevant to Q's text, as a plus of
  /// spans: span.plus(span.retrieve {corpus = NAME, k}). spanc ranks them
  /// by BM25 through its corpus index (retrieval/), so E is not used and
  /// the document is read from the corpus, never from the query: on the
  /// command line NAME is a corpus folder, over the network a name the
  /// server was given with --corpus NAME=DIR. `k` (not spnl's) overrides
  /// SpnlImportOptions::augmentK.
  Lowered lowerAugment(const Json &body, const std::string &path,
                       unsigned depth, const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'augment' takes an object with "
                               "'embedding_model', 'body' and 'doc', found ") +
                       describeJsonKind(body));
    bool ok = true;
    std::string corpus, text;
    int64_t k = options.augmentK;
    bool haveBody = false, haveDoc = false;
    for (const auto &item : body.items()) {
      const std::string &key = item.key();
      const Json &value = item.value();
      std::string keyPath = path + "/" + pointerSegment(key);
      if (key == "embedding_model") {
        if (!value.is_string()) {
          error(body, keyPath,
                llvm::Twine("'embedding_model' takes a string, found ") +
                    describeJsonKind(value));
          ok = false;
        }
      } else if (key == "body") {
        haveBody = true;
        ok &= collectMessageText(value, keyPath, body, depth + 1, text);
      } else if (key == "doc") {
        haveDoc = true;
        const Json *name = &value;
        if (value.is_array() && !value.empty() && value.size() <= 2)
          name = &value[0];
        if (!name->is_string() || name->get<std::string>().empty()) {
          error(value.is_array() ? value : body, keyPath,
                "'doc' takes a corpus name, or [name, document], found " +
                    llvm::Twine(describeJsonKind(value)));
          ok = false;
        } else {
          corpus = name->get<std::string>();
        }
      } else if (key == "k") {
        const ir::AttrSpec &spec =
            *ir::getOpInfo(ir::OpKind::Retrieve).findAttribute("k");
        if (std::optional<ir::Attribute> checked =
                lowerOptionValue(body, key, value, keyPath, spec))
          k = checked->getInt();
        else
          ok = false;
      } else {
        error(body, keyPath,
              "unknown key '" + key +
                  "'; 'augment' takes embedding_model, body, doc and k");
        ok = false;
      }
    }
    if (!haveBody || !haveDoc) {
      error(node, path,
            llvm::Twine("'augment' needs '") + (haveBody ? "doc" : "body") +
                "'");
      ok = false;
    }
    if (!ok)
      return Lowered::failure();
    builder.setLoc(locate(node));
    ir::Op *retrieve = builder.createRetrieve(corpus, k, text);
    return {create(node, ir::OpKind::Plus, {retrieve})};
  }

  Lowered lowerMap(const Json &body, const std::string &path,
                   const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'map' takes an object with 'metadata' and "
                               "'inputs', found ") +
                       describeJsonKind(body));
    llvm::SmallVector<ir::NamedAttribute, 4> options;
    bool ok = true;
    const Json *inputs = nullptr;
    for (const auto &item : body.items()) {
      const std::string &key = item.key();
      std::string keyPath = path + "/" + pointerSegment(key);
      if (key == "metadata") {
        if (!item.value().is_object()) {
          error(body, keyPath,
                llvm::Twine("'metadata' takes an object, found ") +
                    describeJsonKind(item.value()));
          ok = false;
          continue;
        }
        ok &= lowerOptions(item.value(), keyPath, {}, options);
      } else if (key == "inputs") {
        inputs = &item.value();
      } else {
        error(body, keyPath,
              "unknown key '" + key + "'; 'map' takes metadata and inputs");
        ok = false;
      }
    }
    if (!inputs)
      return error(node, path, "'map' needs 'inputs'");
    if (!inputs->is_array())
      return error(body, path + "/inputs",
                   llvm::Twine("'inputs' takes an array of strings, found ") +
                       describeJsonKind(*inputs));
    for (size_t i = 0; i < inputs->size(); ++i)
      if (!(*inputs)[i].is_string()) {
        error(body, path + "/inputs/" + std::to_string(i),
              llvm::Twine("'inputs' takes strings, found ") +
                  describeJsonKind((*inputs)[i]));
        ok = false;
      }
    if (!ok)
      return Lowered::failure();
    // One independent generate per input: a plus of gens.
    llvm::SmallVector<ir::Op *, 8> gens;
    for (const Json &input : *inputs) {
      ir::Op *user =
          create(node, ir::OpKind::User, {}, {}, input.get<std::string>());
      gens.push_back(create(node, ir::OpKind::Gen, {user}, options));
    }
    return {create(node, ir::OpKind::Plus, gens)};
  }

  unsigned bufferId;
  ir::DiagnosticEngine &diagnostics;
  const SpnlImportOptions &options;
  /// The document being imported (set by run()).
  const JsonSource *source = nullptr;
  ir::Builder builder;
  /// Whether the node being lowered is (part of) a g's input.
  bool inModelInput = false;
};

} // namespace

std::unique_ptr<ir::Module> importSpnlJson(unsigned bufferId,
                                           ir::DiagnosticEngine &diagnostics,
                                           const SpnlImportOptions &options) {
  diagnostics.registerBuffer(diagnostics.getSourceMgr()
                                 .getMemoryBuffer(bufferId)
                                 ->getBufferIdentifier(),
                             bufferId);
  Importer importer(bufferId, diagnostics, options);
  return importer.run();
}

} // namespace spanc::frontend
