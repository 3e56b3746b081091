//===- SpnlJson.cpp - Import IBM spnl's JSON query form into span IR ------===//

#include "frontend/SpnlJson.h"

#include "support/JsonDepth.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <nlohmann/json.hpp>

namespace spanc::frontend {

namespace {

// Ordered, so that a walk over the document meets objects in text order
// (which is how nodes get their locations).
using Json = nlohmann::ordered_json;

/// Nesting limit for the recursive import: the JSON's own (checked before
/// the document is built, support/JsonDepth.h), so the walk over it, which
/// is recursive, stays within it too.
constexpr unsigned kMaxDepth = support::kMaxJsonDepth;

const char *kindName(const Json &value) {
  switch (value.type()) {
  case Json::value_t::null:
    return "null";
  case Json::value_t::boolean:
    return "a boolean";
  case Json::value_t::string:
    return "a string";
  case Json::value_t::array:
    return "an array";
  case Json::value_t::object:
    return "an object";
  case Json::value_t::number_integer:
  case Json::value_t::number_unsigned:
    return "an integer";
  case Json::value_t::number_float:
    return "a number";
  default:
    return "a value";
  }
}

/// A JSON Pointer segment: '~' and '/' escaped as RFC 6901 says.
std::string pointerSegment(llvm::StringRef key) {
  std::string result;
  for (char c : key) {
    if (c == '~')
      result += "~0";
    else if (c == '/')
      result += "~1";
    else
      result += c;
  }
  return result;
}

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
      : diagnostics(diagnostics), options(options),
        buffer(diagnostics.getSourceMgr().getMemoryBuffer(bufferId)) {}

  std::unique_ptr<ir::Module> run() {
    unsigned errorsBefore = diagnostics.getNumErrors();
    llvm::StringRef text = buffer->getBuffer();
    // Before anything is built: what follows is linear in the size of the
    // text only within the depth limit.
    if (std::optional<size_t> tooDeep = support::findJsonDepthExcess(text)) {
      diagnostics.emit(at(*tooDeep), llvm::SourceMgr::DK_Error,
                       "invalid JSON: nesting deeper than " +
                           llvm::Twine(support::kMaxJsonDepth) +
                           " levels is not supported");
      return nullptr;
    }
    Json document;
    try {
      document = Json::parse(text.begin(), text.end());
    } catch (const Json::parse_error &error) {
      // `byte` is 1-based and may point one past the end.
      size_t offset = error.byte ? error.byte - 1 : 0;
      diagnostics.emit(at(std::min(offset, text.size())),
                       llvm::SourceMgr::DK_Error,
                       "invalid JSON: " + cleanMessage(error.what()));
      return nullptr;
    } catch (const Json::exception &error) {
      // Other failures while building the document (a number that does not
      // fit a double, "1e400", is out_of_range.406) carry no position; a SAX
      // pass that only listens for the error finds the offending token.
      diagnostics.emit(at(locateFailure(text)), llvm::SourceMgr::DK_Error,
                       "invalid JSON: " + cleanMessage(error.what()));
      return nullptr;
    }
    // The parser keeps the last of two equal keys; the first value would
    // be dropped without a word.
    if (reportDuplicateKeys(text))
      return nullptr;
    locateNodes(text, document);

    auto module = std::make_unique<ir::Module>();
    std::string name =
        llvm::sys::path::stem(buffer->getBufferIdentifier()).str();
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
  llvm::SMLoc at(size_t offset) const {
    return llvm::SMLoc::getFromPointer(buffer->getBufferStart() + offset);
  }

  /// Ignores every SAX event but the error, whose position it records.
  struct ErrorLocator : nlohmann::json_sax<Json> {
    size_t offset = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t &) override {
      return true;
    }
    bool string(string_t &) override { return true; }
    bool binary(binary_t &) override { return true; }
    bool start_object(size_t) override { return true; }
    bool key(string_t &) override { return true; }
    bool end_object() override { return true; }
    bool start_array(size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(size_t position, const std::string &lastToken,
                     const nlohmann::detail::exception &) override {
      // `position` counts the bytes read, the offending token included.
      offset = position >= lastToken.size() ? position - lastToken.size() : 0;
      return false;
    }
  };

  /// The offset of the token that made Json::parse throw (0 if unknown).
  size_t locateFailure(llvm::StringRef text) const {
    ErrorLocator locator;
    try {
      Json::sax_parse(text.begin(), text.end(), &locator);
    } catch (const Json::exception &) {
    }
    return std::min(locator.offset, text.size());
  }

  static std::string cleanMessage(llvm::StringRef message) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2:
    // syntax error ..." -> keep what follows the position;
    // "[json.exception.out_of_range.406] number overflow ..." -> drop the tag
    // (the diagnostic gives the position itself).
    if (!message.startswith("[json.exception"))
      return message.str();
    size_t colon = message.find(": ");
    if (colon != llvm::StringRef::npos)
      return message.substr(colon + 2).str();
    size_t tagEnd = message.find("] ");
    if (tagEnd != llvm::StringRef::npos)
      return message.substr(tagEnd + 2).str();
    return message.str();
  }

  /// Reports every key that its object already has, at the key, with its
  /// JSON Pointer; returns whether there was one. `text` parsed, so it is
  /// well formed and a small state machine follows it: in an object, the
  /// string after '{' or ',' is a key.
  bool reportDuplicateKeys(llvm::StringRef text) {
    struct Container {
      bool isObject;
      bool expectingKey;
      std::string child; ///< the pointer segment of the current child
      unsigned index = 0;
      llvm::StringSet<> keys;
    };
    // The parser stops at a NUL byte: what follows was never read, need not
    // be JSON, and is not scanned.
    text = text.take_until([](char c) { return c == '\0'; });
    std::vector<Container> stack;
    bool found = false;
    // Built only for a report: a pointer kept per container would make the
    // scan quadratic in the depth.
    auto childPath = [&] {
      std::string path;
      for (const Container &container : stack)
        path += "/" + container.child;
      return path;
    };
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (c == '"') {
        size_t start = i++;
        bool escaped = false;
        for (; i < text.size() && text[i] != '"'; ++i)
          if (text[i] == '\\') {
            escaped = true;
            ++i;
          }
        // An unterminated string (never in text the parser accepted; kept
        // safe all the same).
        if (i >= text.size())
          break;
        if (stack.empty() || !stack.back().expectingKey)
          continue;
        Container &object = stack.back();
        object.expectingKey = false;
        llvm::StringRef quoted = text.slice(start, i + 1);
        // Decoded without exceptions: the scan may run over a key the full
        // parse rejects (a raw control character); it is compared raw.
        std::string key = quoted.drop_front().drop_back().str();
        if (escaped) {
          Json decoded = Json::parse(quoted.begin(), quoted.end(), nullptr,
                                     /*allow_exceptions=*/false);
          if (decoded.is_string())
            key = decoded.get<std::string>();
        }
        object.child = pointerSegment(key);
        if (!object.keys.insert(key).second) {
          diagnostics.emit(at(start), llvm::SourceMgr::DK_Error,
                           "duplicate key '" + key +
                               "': a JSON reader keeps only its last value "
                               "(at " +
                               childPath() + ")");
          found = true;
        }
      } else if (c == '{' || c == '[') {
        stack.push_back({c == '{', c == '{', "0", 0, {}});
      } else if (c == '}' || c == ']') {
        // The parser stops at a NUL byte, so bytes after one were never
        // checked: never trust the text to balance.
        if (!stack.empty())
          stack.pop_back();
      } else if (c == ',' && !stack.empty()) {
        Container &container = stack.back();
        if (container.isObject)
          container.expectingKey = true;
        else
          container.child = std::to_string(++container.index);
      }
    }
    return found;
  }

  /// Records the offset of each object and array: the n-th '{' outside
  /// strings is the n-th object of a pre-order walk.
  void locateNodes(llvm::StringRef text, const Json &document) {
    std::vector<uint32_t> objectOffsets, arrayOffsets;
    bool inString = false;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (inString) {
        if (c == '\\')
          ++i;
        else if (c == '"')
          inString = false;
      } else if (c == '"') {
        inString = true;
      } else if (c == '{') {
        objectOffsets.push_back(static_cast<uint32_t>(i));
      } else if (c == '[') {
        arrayOffsets.push_back(static_cast<uint32_t>(i));
      }
    }
    size_t nextObject = 0, nextArray = 0;
    // Iterative pre-order walk (children pushed in reverse).
    std::vector<const Json *> stack = {&document};
    while (!stack.empty()) {
      const Json *node = stack.back();
      stack.pop_back();
      if (node->is_object() && nextObject < objectOffsets.size())
        offsets[node] = objectOffsets[nextObject++];
      else if (node->is_array() && nextArray < arrayOffsets.size())
        offsets[node] = arrayOffsets[nextArray++];
      if (node->is_structured()) {
        std::vector<const Json *> children;
        for (const Json &child : *node)
          children.push_back(&child);
        stack.insert(stack.end(), children.rbegin(), children.rend());
      }
    }
  }

  ir::Location locate(const Json &node) {
    auto it = offsets.find(&node);
    return diagnostics.getLocation(at(it == offsets.end() ? 0 : it->second));
  }

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
                       kindName(list));
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
      return error(parent && !offsets.count(&node) ? *parent : node, path,
                   llvm::Twine("expected a query node (an object such as "
                               "{\"user\": \"...\"}), found ") +
                       kindName(node));
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
                     "'" + kind + "' takes a string, found " + kindName(body));
      ir::OpKind opKind = kind == "user"     ? ir::OpKind::User
                          : kind == "system" ? ir::OpKind::System
                                             : ir::OpKind::Assistant;
      return {create(node, opKind, {}, {}, body.get<std::string>())};
    }
    if (kind == "print") {
      if (!body.is_string())
        return error(node, bodyPath,
                     llvm::Twine("'print' takes a string, found ") +
                         kindName(body));
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
      std::optional<ir::Attribute> attr;
      switch (spec->type) {
      case ir::AttrType::String:
        if (value.is_string())
          attr = ir::Attribute(value.get<std::string>());
        break;
      case ir::AttrType::Int:
        if (value.is_number_integer() &&
            !(value.is_number_unsigned() &&
              value.get<uint64_t>() > uint64_t(INT64_MAX)))
          attr = ir::Attribute(value.get<int64_t>());
        break;
      case ir::AttrType::Float:
        if (value.is_number())
          attr = ir::Attribute(value.get<double>());
        break;
      }
      if (!attr) {
        error(object, keyPath,
              "'" + key + "' takes " +
                  (spec->type == ir::AttrType::String ? "a string"
                   : spec->type == ir::AttrType::Int  ? "an integer"
                                                      : "a number") +
                  ", found " + kindName(value));
        ok = false;
        continue;
      }
      if (spec->type != ir::AttrType::String) {
        double number = attr->getNumber();
        // spnl writes max_tokens = 0 (its default) for "as many as the
        // server allows": left out, as when absent, for the compiler's
        // default (codegen::LoweringLimits::defaultMaxTokens).
        if (key == "max_tokens" && number == 0)
          continue;
        if (number < spec->min || number > spec->max) {
          error(object, keyPath,
                spec->min == 0 && number < 0
                    ? "'" + key + "' must not be negative"
                    : "'" + key + "' is out of range [" +
                          llvm::Twine(int64_t(spec->min)) + ", " +
                          llvm::Twine(int64_t(spec->max)) + "]");
          ok = false;
          continue;
        }
      }
      result.push_back({key, std::move(*attr)});
    }
    return ok;
  }

  Lowered lowerGenerate(const Json &body, const std::string &path,
                        unsigned depth, const Json &node) {
    if (!body.is_object())
      return error(node, path,
                   llvm::Twine("'g' takes an object with 'input', found ") +
                       kindName(body));
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
                       kindName(body));
    std::optional<int64_t> n;
    Lowered inner = Lowered::failure();
    bool ok = true, haveBody = false;
    for (const auto &item : body.items()) {
      const std::string &key = item.key();
      std::string keyPath = path + "/" + pointerSegment(key);
      if (key == "n") {
        const Json &value = item.value();
        if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
            (value.is_number_unsigned() &&
             value.get<uint64_t>() > uint64_t(INT64_MAX))) {
          error(body, keyPath,
                "'n' must be an integer of at least 1, found " +
                    (value.is_number_integer()
                         ? std::to_string(value.get<int64_t>())
                         : std::string(kindName(value))));
          ok = false;
        } else {
          n = value.get<int64_t>();
        }
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
    return error(
        node, path,
        llvm::Twine("'bulk' takes an object {\"repeat\": ...} or "
                    "{\"map\": ...}, found ") +
            (body.is_object() ? "an object without either" : kindName(body)));
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
                       kindName(body));
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
      error(offsets.count(&node) ? node : parent, path,
            "'augment' takes messages as its 'body' (their text is what it "
            "retrieves for), found " +
                llvm::Twine(node.is_object() && node.size() == 1
                                ? "'" + node.begin().key() + "'"
                                : std::string(kindName(node))));
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
                       kindName(body));
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
                    kindName(value));
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
                    llvm::Twine(kindName(value)));
          ok = false;
        } else {
          corpus = name->get<std::string>();
        }
      } else if (key == "k") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
            value.get<int64_t>() > 1000000) {
          error(body, keyPath, "'k' must be an integer in [1, 1000000]");
          ok = false;
        } else {
          k = value.get<int64_t>();
        }
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
                       kindName(body));
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
                    kindName(item.value()));
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
                       kindName(*inputs));
    for (size_t i = 0; i < inputs->size(); ++i)
      if (!(*inputs)[i].is_string()) {
        error(body, path + "/inputs/" + std::to_string(i),
              llvm::Twine("'inputs' takes strings, found ") +
                  kindName((*inputs)[i]));
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

  ir::DiagnosticEngine &diagnostics;
  const SpnlImportOptions &options;
  const llvm::MemoryBuffer *buffer;
  llvm::DenseMap<const Json *, uint32_t> offsets;
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
