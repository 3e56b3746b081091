//===- Lowering.cpp - Lower a .span parse tree to span IR -----------------===//

#include "frontend/Lowering.h"

#include "frontend/OptionConversion.h"
#include "grammar/SpanLexer.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Stack.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace spanc::frontend {

using grammar::SpanParser;

bool parseParamOverride(llvm::StringRef text,
                        std::pair<std::string, std::string> &result) {
  auto [name, value] = text.split('=');
  if (name.empty() || name.size() == text.size())
    return false;
  result = {name.trim().str(), value.str()};
  return true;
}

namespace {

/// Lowering stops making ops past this many (lets that use each other
/// twice per level grow exponentially when inlined).
constexpr size_t kMaxOps = 1'000'000;

class Lowering {
public:
  Lowering(const SyntaxTree &tree, ir::DiagnosticEngine &diagnostics,
           const FrontendOptions &options)
      : tree(tree), diagnostics(diagnostics), options(options) {
    llvm::StringRef identifier = diagnostics.getSourceMgr()
                                     .getMemoryBuffer(tree.getBufferId())
                                     ->getBufferIdentifier();
    directory = llvm::sys::path::parent_path(identifier).str();
  }

  std::unique_ptr<ir::Module> run() {
    collectDeclarations();
    applyOverrides();
    checkLets();
    auto module = std::make_unique<ir::Module>();
    bool anyQuery = false;
    for (SpanParser::DeclContext *decl : tree.module()->decl()) {
      auto *queryDecl = dynamic_cast<SpanParser::QueryDeclContext *>(decl);
      if (!queryDecl)
        continue;
      anyQuery = true;
      ir::Query *query = module->addQuery(queryDecl->ID()->getText(),
                                          locate(queryDecl->getStart()));
      builder.setInsertionPointToEnd(query);
      ir::Op *result = lowerBody(queryDecl->block());
      if (result) {
        builder.setLoc(query->getLoc());
        builder.createYield(result);
      }
    }
    // An empty file (or one of params and lets only) would compile to
    // nothing and run nothing, successfully.
    if (!anyQuery)
      diagnostics.emit(
          llvm::SMLoc::getFromPointer(diagnostics.getSourceMgr()
                                          .getMemoryBuffer(tree.getBufferId())
                                          ->getBufferStart()),
          llvm::SourceMgr::DK_Error,
          "this program declares no query, so there is nothing "
          "to compile or run (write one: query NAME { ... })");
    if (diagnostics.getNumErrors() != errorsBefore)
      return nullptr;
    return module;
  }

private:
  struct Param {
    ir::Attribute value;
    antlr4::Token *name;
  };
  struct Let {
    SpanParser::ExprContext *expr;
    antlr4::Token *name;
    bool inProgress = false;
  };

  //===--------------------------------------------------------------------===//
  // Locations and errors
  //===--------------------------------------------------------------------===//

  ir::Location locate(const antlr4::Token *token) {
    return diagnostics.getLocation(tree.locationOf(token));
  }
  void error(const antlr4::Token *token, const llvm::Twine &message) {
    diagnostics.emit(tree.locationOf(token), llvm::SourceMgr::DK_Error,
                     message);
  }
  void note(const antlr4::Token *token, const llvm::Twine &message) {
    diagnostics.emit(tree.locationOf(token), llvm::SourceMgr::DK_Note, message);
  }
  /// An error without a place in the source (a bad --set).
  void error(const llvm::Twine &message) {
    diagnostics.error(ir::Location(), message);
  }

  //===--------------------------------------------------------------------===//
  // Declarations
  //===--------------------------------------------------------------------===//

  void collectDeclarations() {
    // One namespace for params, lets and queries: a name means one thing.
    llvm::StringMap<antlr4::Token *> declared;
    for (SpanParser::DeclContext *decl : tree.module()->decl()) {
      antlr4::Token *name = nullptr;
      if (auto *param = dynamic_cast<SpanParser::ParamDeclContext *>(decl))
        name = param->ID()->getSymbol();
      else if (auto *let = dynamic_cast<SpanParser::LetDeclContext *>(decl))
        name = let->ID()->getSymbol();
      else if (auto *query = dynamic_cast<SpanParser::QueryDeclContext *>(decl))
        name = query->ID()->getSymbol();
      if (!name)
        continue;
      auto [it, inserted] = declared.try_emplace(name->getText(), name);
      if (!inserted) {
        error(name, "duplicate name '" + name->getText() + "'");
        note(it->second, "'" + name->getText() + "' is first declared here");
        continue;
      }
      if (auto *let = dynamic_cast<SpanParser::LetDeclContext *>(decl))
        lets.try_emplace(name->getText(), Let{let->expr(), name});
    }
    // Params may name params declared before them.
    for (SpanParser::DeclContext *decl : tree.module()->decl()) {
      auto *param = dynamic_cast<SpanParser::ParamDeclContext *>(decl);
      if (!param)
        continue;
      antlr4::Token *name = param->ID()->getSymbol();
      if (params.count(name->getText()) || lets.count(name->getText()))
        continue; // a duplicate, reported above
      std::optional<ir::Attribute> value = evaluateLiteral(param->literal());
      if (value)
        params.try_emplace(name->getText(), Param{*value, name});
      else
        failedNames.insert(name->getText());
    }
  }

  void applyOverrides() {
    for (const auto &[name, text] : options.paramOverrides) {
      auto it = params.find(name);
      if (it == params.end()) {
        if (!failedNames.count(name))
          error("--set " + name + "=" + text + ": no param named '" + name +
                "' in this program");
        continue;
      }
      Param &param = it->second;
      llvm::StringRef value(text);
      switch (param.value.kind()) {
      case ir::Attribute::Kind::String:
        param.value = ir::Attribute(value);
        break;
      case ir::Attribute::Kind::Int: {
        int64_t number = 0;
        if (value.trim().getAsInteger(10, number)) {
          error("--set " + name + "=" + text + ": param '" + name +
                "' is an integer");
          note(param.name, "'" + name + "' is declared here");
          break;
        }
        param.value = ir::Attribute(number);
        break;
      }
      case ir::Attribute::Kind::Float: {
        std::string copy = value.trim().str();
        char *end = nullptr;
        errno = 0;
        double number = std::strtod(copy.c_str(), &end);
        if (copy.empty() || end != copy.c_str() + copy.size() ||
            errno == ERANGE || !std::isfinite(number)) {
          error("--set " + name + "=" + text + ": param '" + name +
                "' is a number");
          note(param.name, "'" + name + "' is declared here");
          break;
        }
        param.value = ir::Attribute(number);
        break;
      }
      }
    }
  }

  /// Lowers each let once where it is declared, so that its errors are
  /// reported once; uses inline it again with messages muted. Here, a let
  /// that lowered once is reused where another let names it (the scratch
  /// IR may share ops), so a chain of lets each using the one before costs
  /// its length, not its square.
  void checkLets() {
    ir::Module scratch;
    ir::Query *query = scratch.addQuery("let", {});
    checkingLets = true;
    auto done = llvm::make_scope_exit([&] {
      checkingLets = false;
      checkedLets.clear();
      // The budget is for the program's own ops (lets inlined where they
      // are used), not for this scratch copy.
      numOps = 0;
    });
    for (SpanParser::DeclContext *decl : tree.module()->decl()) {
      auto *let = dynamic_cast<SpanParser::LetDeclContext *>(decl);
      if (!let)
        continue;
      auto it = lets.find(let->ID()->getText());
      if (it == lets.end() || it->second.name != let->ID()->getSymbol())
        continue;
      // A let bound to a string is text, used in text positions only.
      if (dynamic_cast<SpanParser::StringExprContext *>(let->expr())) {
        std::string text;
        decodeString(dynamic_cast<SpanParser::StringExprContext *>(let->expr())
                         ->STRING()
                         ->getSymbol(),
                     text);
        continue;
      }
      // Lowered without error while another let was checked: its body is
      // sound.
      if (checkedLets.count(let->ID()->getText()))
        continue;
      builder.setInsertionPointToEnd(query);
      it->second.inProgress = true;
      if (ir::Op *op = lowerExpr(let->expr()))
        checkedLets[let->ID()->getText()] = op;
      it->second.inProgress = false;
    }
  }

  //===--------------------------------------------------------------------===//
  // Literals and text
  //===--------------------------------------------------------------------===//

  /// Decodes a STRING token: escapes in "...", none in """...""".
  bool decodeString(antlr4::Token *token, std::string &result) {
    std::string text = token->getText();
    llvm::StringRef spelling = text;
    if (spelling.startswith("\"\"\"") && spelling.size() >= 6) {
      result = spelling.drop_front(3).drop_back(3).str();
      return true;
    }
    size_t errorOffset = 0;
    std::string problem;
    if (!ir::unescapeString(spelling.drop_front().drop_back(), result,
                            errorOffset, &problem)) {
      // At the escape itself: the token's text is its bytes in the source.
      llvm::SMLoc at = llvm::SMLoc::getFromPointer(
          tree.locationOf(token).getPointer() + 1 + errorOffset);
      diagnostics.emit(at, llvm::SourceMgr::DK_Error, problem);
      return false;
    }
    return true;
  }

  /// The value of a literal: a string, an int, a float, or a param's value.
  std::optional<ir::Attribute>
  evaluateLiteral(SpanParser::LiteralContext *literal) {
    if (auto *string = literal->STRING()) {
      std::string text;
      if (!decodeString(string->getSymbol(), text))
        return std::nullopt;
      return ir::Attribute(std::move(text));
    }
    if (auto *integer = literal->INT()) {
      int64_t value = 0;
      if (llvm::StringRef(integer->getText()).getAsInteger(10, value)) {
        error(integer->getSymbol(),
              "integer '" + integer->getText() + "' is out of range");
        return std::nullopt;
      }
      return ir::Attribute(value);
    }
    if (auto *number = literal->FLOAT()) {
      std::string text = number->getText();
      errno = 0;
      double value = std::strtod(text.c_str(), nullptr);
      if (errno == ERANGE || !std::isfinite(value)) {
        error(number->getSymbol(), "number '" + text + "' is out of range");
        return std::nullopt;
      }
      return ir::Attribute(value);
    }
    antlr4::Token *name = literal->ID()->getSymbol();
    return resolveValueName(name);
  }

  /// A name used as a value: a param, or a let bound to a string.
  std::optional<ir::Attribute> resolveValueName(antlr4::Token *name) {
    std::string key = name->getText();
    if (auto it = params.find(key); it != params.end())
      return it->second.value;
    if (auto it = lets.find(key); it != lets.end()) {
      if (auto *string =
              dynamic_cast<SpanParser::StringExprContext *>(it->second.expr)) {
        std::string text;
        if (!decodeString(string->STRING()->getSymbol(), text))
          return std::nullopt;
        return ir::Attribute(std::move(text));
      }
      error(name, "'" + key + "' is a span, not a value");
      return std::nullopt;
    }
    if (failedNames.count(key))
      return std::nullopt; // its own error was reported where it is declared
    error(name, "unknown name '" + key + "'");
    return std::nullopt;
  }

  /// Text of a message or fragment: a string, a string param or let, or the
  /// contents of file("...").
  std::optional<std::string> lowerText(SpanParser::TextContext *text) {
    // As for expressions, the first token tells the alternative.
    size_t type = text->getStart()->getType();
    if (type == grammar::SpanLexer::STRING) {
      auto *string = static_cast<SpanParser::StringTextContext *>(text);
      std::string result;
      if (!decodeString(string->STRING()->getSymbol(), result))
        return std::nullopt;
      return result;
    }
    if (type == grammar::SpanLexer::ID) {
      auto *name = static_cast<SpanParser::NameTextContext *>(text);
      std::optional<ir::Attribute> value =
          resolveValueName(name->ID()->getSymbol());
      if (!value)
        return std::nullopt;
      if (!value->isString()) {
        error(name->ID()->getSymbol(), "'" + name->ID()->getText() + "' is " +
                                           ir::describeAttrKind(value->kind()) +
                                           ", not text");
        return std::nullopt;
      }
      return value->getString().str();
    }
    auto *file = static_cast<SpanParser::FileTextContext *>(text);
    std::string path;
    if (!decodeString(file->STRING()->getSymbol(), path))
      return std::nullopt;
    return readFile(path, file->getStart());
  }

  std::optional<std::string> readFile(const std::string &path,
                                      antlr4::Token *at) {
    llvm::SmallString<256> fullPath(path);
    if (!llvm::sys::path::is_absolute(fullPath) && !directory.empty()) {
      fullPath = directory;
      llvm::sys::path::append(fullPath, path);
    }
    auto cached = fileContents.find(fullPath);
    if (cached != fileContents.end())
      return cached->second;
    llvm::Expected<std::string> contents =
        support::readFile(fullPath, options.readPolicy);
    if (!contents) {
      error(at, "cannot read file " + llvm::toString(contents.takeError()));
      return std::nullopt;
    }
    fileContents.try_emplace(fullPath, *contents);
    return std::move(*contents);
  }

  //===--------------------------------------------------------------------===//
  // Options
  //===--------------------------------------------------------------------===//

  /// Checks each option once: known to `lookup`, not repeated, of the
  /// spec's type and range; `accept` gets the good ones. Errors say what
  /// `opName` accepts (`known`). Returns false if any option was bad.
  bool convertOptions(
      SpanParser::OptsContext *opts, llvm::StringRef opName,
      llvm::StringRef known,
      llvm::function_ref<const ir::AttrSpec *(llvm::StringRef)> lookup,
      llvm::StringSet<> &seen,
      llvm::function_ref<void(const std::string &, ir::Attribute)> accept) {
    bool ok = true;
    for (SpanParser::OptContext *opt : opts->opt()) {
      antlr4::Token *key = opt->key->getStart();
      std::string name = key->getText();
      const ir::AttrSpec *spec = lookup(name);
      if (!spec) {
        error(key, "unknown option '" + name + "' for " + opName +
                       "; expected one of " + known);
        ok = false;
        continue;
      }
      if (!seen.insert(name).second) {
        error(key, "duplicate option '" + name + "'");
        ok = false;
        continue;
      }
      std::optional<ir::Attribute> value = lowerOption(opt, *spec);
      if (!value) {
        ok = false;
        continue;
      }
      accept(name, std::move(*value));
    }
    return ok;
  }

  /// Checks and converts `gen`/`chat` options against the op's schema.
  llvm::SmallVector<ir::NamedAttribute, 4>
  lowerModelOptions(SpanParser::OptsContext *opts, const char *opName,
                    bool &ok) {
    llvm::SmallVector<ir::NamedAttribute, 4> result;
    if (!opts)
      return result;
    const ir::OpInfo &info = ir::getOpInfo(ir::OpKind::Gen);
    std::string known;
    for (const ir::AttrSpec &candidate : info.attributes)
      known += (known.empty() ? "" : ", ") + std::string(candidate.name);
    llvm::StringSet<> seen;
    if (!convertOptions(
            opts, opName, known,
            [&](llvm::StringRef name) { return info.findAttribute(name); },
            seen,
            [&](const std::string &name, ir::Attribute value) {
              result.push_back({name, std::move(value)});
            }))
      ok = false;
    return result;
  }

  /// An option's literal as the attribute `spec` describes, or nothing
  /// after an error at the literal (convertOption's words).
  std::optional<ir::Attribute> lowerOption(SpanParser::OptContext *opt,
                                           const ir::AttrSpec &spec) {
    std::optional<ir::Attribute> value = evaluateLiteral(opt->literal());
    if (!value)
      return std::nullopt;
    llvm::Expected<ir::Attribute> converted = convertOption(spec, *value);
    if (!converted) {
      error(opt->literal()->getStart(),
            "option '" + opt->key->getText() + "' " +
                llvm::toString(converted.takeError()));
      return std::nullopt;
    }
    return std::move(*converted);
  }

  //===--------------------------------------------------------------------===//
  // Expressions
  //===--------------------------------------------------------------------===//

  /// Creates an op at `at`, unless the op budget is spent.
  ir::Op *create(antlr4::Token *at, ir::OpKind kind,
                 llvm::ArrayRef<ir::Op *> operands,
                 llvm::ArrayRef<ir::NamedAttribute> attributes = {},
                 llvm::StringRef text = {}) {
    if (++numOps > kMaxOps) {
      if (!budgetReported) {
        // Reported even from inside a quiet let inlining.
        bool wasMuted = diagnostics.isMuted();
        diagnostics.setMuted(false);
        error(at, "the program is too large: more than " +
                      llvm::Twine(kMaxOps) + " ops after inlining lets");
        diagnostics.setMuted(wasMuted);
      }
      budgetReported = true;
      return nullptr;
    }
    builder.setLoc(locate(at));
    return builder.create(kind, operands, attributes, text);
  }

  /// The children of a block; false if any failed (the others are still
  /// lowered, to report their errors too).
  bool lowerChildren(SpanParser::BlockContext *block,
                     llvm::SmallVectorImpl<ir::Op *> &children) {
    bool ok = true;
    for (SpanParser::ExprContext *expr : block->expr()) {
      ir::Op *child = lowerExpr(expr);
      if (child)
        children.push_back(child);
      else
        ok = false;
    }
    return ok;
  }

  /// A query or repeat body: its only expression, or a cross of several.
  ir::Op *lowerBody(SpanParser::BlockContext *block) {
    llvm::SmallVector<ir::Op *, 8> children;
    if (!lowerChildren(block, children))
      return nullptr;
    if (children.size() == 1)
      return children.front();
    return create(block->getStart(), ir::OpKind::Cross, children);
  }

  ir::Op *lowerJoin(SpanParser::BlockContext *block, antlr4::Token *at,
                    ir::OpKind kind) {
    llvm::SmallVector<ir::Op *, 8> children;
    if (!lowerChildren(block, children))
      return nullptr;
    return create(at, kind, children);
  }

  /// Which alternative of `expr` an expression is. Each alternative starts
  /// with its own token, and lowering only sees trees without syntax
  /// errors, so the first token decides; this is much cheaper than trying
  /// a dynamic_cast per alternative (the front end's hot path).
  enum class ExprKind {
    CrossBlock,
    Cross,
    Plus,
    Message,
    Fragment,
    Gen,
    Chat,
    Repeat,
    Retrieve,
    String,
    Name
  };
  static ExprKind classify(const antlr4::Token *start) {
    size_t type = start->getType();
    if (type == grammar::SpanLexer::STRING)
      return ExprKind::String;
    if (type == grammar::SpanLexer::ID)
      return ExprKind::Name;
    std::string keyword = start->getText();
    if (keyword == "{")
      return ExprKind::CrossBlock;
    if (keyword == "cross")
      return ExprKind::Cross;
    if (keyword == "plus")
      return ExprKind::Plus;
    if (keyword == "fragment")
      return ExprKind::Fragment;
    if (keyword == "gen")
      return ExprKind::Gen;
    if (keyword == "chat")
      return ExprKind::Chat;
    if (keyword == "repeat")
      return ExprKind::Repeat;
    if (keyword == "retrieve")
      return ExprKind::Retrieve;
    return ExprKind::Message; // system, user, assistant
  }

  ir::Op *lowerExpr(SpanParser::ExprContext *expr) {
    // Past the budget, stop walking too: the inlining tree may be huge.
    if (budgetReported || depthReported)
      return nullptr;
    antlr4::Token *start = expr->getStart();
    // Each level recurses here; lets inlined into lets nest deeper than
    // the source's braces (which the parser bounds), so the bound the
    // verifier puts on the IR is kept here too, before the stack runs out.
    if (exprDepth >= ir::kMaxNestingDepth) {
      depthReported = true;
      bool wasMuted = diagnostics.isMuted();
      diagnostics.setMuted(false);
      error(start, "this expression is nested more than " +
                       llvm::Twine(ir::kMaxNestingDepth) +
                       " levels deep (lets inlined); spanc supports at "
                       "most " +
                       llvm::Twine(ir::kMaxNestingDepth));
      diagnostics.setMuted(wasMuted);
      return nullptr;
    }
    ++exprDepth;
    auto leave = llvm::make_scope_exit([&] { --exprDepth; });
    switch (classify(start)) {
    case ExprKind::CrossBlock:
      return lowerJoin(
          static_cast<SpanParser::CrossBlockExprContext *>(expr)->block(),
          start, ir::OpKind::Cross);
    case ExprKind::Cross:
      return lowerJoin(
          static_cast<SpanParser::CrossExprContext *>(expr)->block(), start,
          ir::OpKind::Cross);
    case ExprKind::Plus:
      return lowerJoin(
          static_cast<SpanParser::PlusExprContext *>(expr)->block(), start,
          ir::OpKind::Plus);
    case ExprKind::Message: {
      auto *message = static_cast<SpanParser::MessageExprContext *>(expr);
      std::optional<std::string> text = lowerText(message->text());
      if (!text)
        return nullptr;
      std::string role = message->role->getText();
      ir::OpKind kind = role == "system" ? ir::OpKind::System
                        : role == "user" ? ir::OpKind::User
                                         : ir::OpKind::Assistant;
      return create(start, kind, {}, {}, *text);
    }
    case ExprKind::Fragment: {
      std::optional<std::string> text = lowerText(
          static_cast<SpanParser::FragmentExprContext *>(expr)->text());
      if (!text)
        return nullptr;
      return create(start, ir::OpKind::Fragment, {}, {}, *text);
    }
    case ExprKind::Gen: {
      auto *gen = static_cast<SpanParser::GenExprContext *>(expr);
      bool ok = true;
      auto options = lowerModelOptions(gen->opts(), "gen", ok);
      SpanParser::BlockContext *block = gen->block();
      ir::Op *input = lowerJoin(block, block->getStart(), ir::OpKind::Cross);
      if (!ok || !input)
        return nullptr;
      return create(start, ir::OpKind::Gen, {input}, options);
    }
    case ExprKind::Chat: {
      auto *chat = static_cast<SpanParser::ChatExprContext *>(expr);
      bool ok = true;
      auto options = lowerModelOptions(chat->opts(), "chat", ok);
      llvm::SmallVector<ir::Op *, 8> messages;
      ok &= lowerChildren(chat->block(), messages);
      if (!ok)
        return nullptr;
      return create(start, ir::OpKind::Chat, messages, options);
    }
    case ExprKind::Repeat:
      return lowerRepeat(static_cast<SpanParser::RepeatExprContext *>(expr));
    case ExprKind::Retrieve:
      return lowerRetrieve(
          static_cast<SpanParser::RetrieveExprContext *>(expr));
    case ExprKind::String:
      error(start, "a string needs a role here: write user \"...\" (or "
                   "system, assistant, fragment)");
      return nullptr;
    case ExprKind::Name:
      return lowerName(start);
    }
    return nullptr;
  }

  ir::Op *lowerName(antlr4::Token *name) {
    std::string key = name->getText();
    auto it = lets.find(key);
    if (it == lets.end()) {
      if (params.count(key))
        error(name, "param '" + key +
                        "' is a value, not a span; give it a "
                        "role (user " +
                        key + ")");
      else if (!failedNames.count(key))
        error(name, "unknown name '" + key + "'");
      return nullptr;
    }
    Let &let = it->second;
    if (dynamic_cast<SpanParser::StringExprContext *>(let.expr)) {
      error(name, "'" + key + "' is text; give it a role (user " + key + ")");
      return nullptr;
    }
    if (let.inProgress) {
      // Reported once per place, even from inside a muted inlining.
      bool wasMuted = diagnostics.isMuted();
      diagnostics.setMuted(!reportedCycles.insert(name).second);
      error(name, "let '" + key + "' refers to itself");
      diagnostics.setMuted(wasMuted);
      return nullptr;
    }
    if (checkingLets)
      if (auto checked = checkedLets.find(key); checked != checkedLets.end())
        return checked->second;
    // Inline quietly: checkLets() reports each let's own errors once.
    bool wasMuted = diagnostics.isMuted();
    diagnostics.setMuted(true);
    let.inProgress = true;
    ir::Op *result = lowerExpr(let.expr);
    let.inProgress = false;
    diagnostics.setMuted(wasMuted);
    if (checkingLets && result)
      checkedLets[key] = result;
    return result;
  }

  ir::Op *lowerRepeat(SpanParser::RepeatExprContext *repeat) {
    antlr4::Token *count = repeat->count;
    std::optional<int64_t> n;
    if (repeat->INT()) {
      int64_t value = 0;
      if (llvm::StringRef(count->getText()).getAsInteger(10, value))
        error(count, "repeat count '" + count->getText() + "' is out of range");
      else
        n = value;
    } else if (std::optional<ir::Attribute> value = resolveValueName(count)) {
      if (value->isInt())
        n = value->getInt();
      else
        error(count, "repeat count '" + count->getText() + "' is " +
                         ir::describeAttrKind(value->kind()) +
                         "; expected an integer");
    }
    // The count as the op's attribute, checked as every option is.
    std::optional<ir::Attribute> attribute;
    if (n) {
      const ir::AttrSpec &spec =
          *ir::getOpInfo(ir::OpKind::Repeat).findAttribute("n");
      llvm::Expected<ir::Attribute> converted = convertOption(spec, *n);
      if (converted)
        attribute = std::move(*converted);
      else
        error(count, "repeat count " + llvm::toString(converted.takeError()));
    }
    ir::Op *body = lowerBody(repeat->block());
    if (!attribute || !body)
      return nullptr;
    return create(repeat->getStart(), ir::OpKind::Repeat, {body},
                  {{"n", std::move(*attribute)}});
  }

  ir::Op *lowerRetrieve(SpanParser::RetrieveExprContext *retrieve) {
    antlr4::Token *start = retrieve->getStart();
    const ir::OpInfo &info = ir::getOpInfo(ir::OpKind::Retrieve);
    static const ir::AttrSpec queryOption = {"query", ir::AttrType::String,
                                             true, 0, 0};
    llvm::SmallVector<ir::NamedAttribute, 2> attributes;
    std::optional<std::string> queryText;
    llvm::StringSet<> seen;
    bool ok = convertOptions(
        retrieve->opts(), "retrieve", "corpus, query, k",
        [&](llvm::StringRef name) {
          return name == "query" ? &queryOption : info.findAttribute(name);
        },
        seen,
        [&](const std::string &name, ir::Attribute value) {
          if (name == "query")
            queryText = value.getString().str();
          else
            attributes.push_back({name, std::move(value)});
        });
    for (const char *required : {"corpus", "query", "k"})
      if (!seen.count(required)) {
        error(start, llvm::Twine("retrieve needs option '") + required + "'");
        ok = false;
      }
    if (ok && queryText->empty()) {
      error(start, "retrieve needs a non-empty query");
      ok = false;
    }
    if (!ok)
      return nullptr;
    return create(start, ir::OpKind::Retrieve, {}, attributes, *queryText);
  }

  const SyntaxTree &tree;
  ir::DiagnosticEngine &diagnostics;
  const FrontendOptions &options;
  unsigned errorsBefore = diagnostics.getNumErrors();
  std::string directory;
  llvm::StringMap<Param> params;
  llvm::StringMap<Let> lets;
  /// Names whose declaration had an error: uses stay quiet.
  llvm::StringSet<> failedNames;
  llvm::StringMap<std::string> fileContents;
  ir::Builder builder;
  llvm::SmallPtrSet<antlr4::Token *, 4> reportedCycles;
  size_t numOps = 0;
  bool budgetReported = false;
  /// While checkLets() runs: the lets lowered so far without error.
  bool checkingLets = false;
  llvm::StringMap<ir::Op *> checkedLets;
  /// lowerExpr's recursion depth, and whether it went too deep (said once).
  unsigned exprDepth = 0;
  bool depthReported = false;
};

} // namespace

std::unique_ptr<ir::Module> lowerToIR(const SyntaxTree &tree,
                                      ir::DiagnosticEngine &diagnostics,
                                      const FrontendOptions &options) {
  if (!tree.module() || tree.numSyntaxErrors())
    return nullptr;
  Lowering lowering(tree, diagnostics, options);
  std::unique_ptr<ir::Module> module;
  // Inlining lets recurses once per nesting level (ir/Stack.h).
  ir::runOnWalkStack([&] { module = lowering.run(); });
  return module;
}

} // namespace spanc::frontend
