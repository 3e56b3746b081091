//===- IR.h - The span IR: ops, queries, modules, attributes, locations ---===//
//
// An MLIR-like SSA IR for span queries (docs/ARCHITECTURE.md, "The IR"). A
// Module is an ordered list of Queries (a bulk); a Query owns its Ops in
// program order in an intrusive list, so inserting and erasing are O(1). Every
// non-yield op has one result, which is the op itself: operands are references
// to other ops, kept in intrusive use-lists, so replaceAllUsesWith is O(uses)
// and erasing an operand is O(1). Ops are told apart by OpKind with
// isa/cast/dyn_cast.
//
// A rewrite, e.g. unwrapping a plus of one child (match, then rewrite):
//
//   for (Op &op : llvm::make_early_inc_range(query.getOps()))
//     if (llvm::isa<PlusOp>(&op) && op.getNumOperands() == 1) {
//       op.replaceAllUsesWith(op.getOperand(0));
//       op.erase();                       // its result is unused now
//     }
//
// New ops go where a Builder points: `Builder b; b.setInsertionPoint(&op);
// b.setLoc(op.getLoc()); Op *x = b.createCross({a, c});` inserts before op.
// Operands must be defined earlier in the same query (the verifier checks;
// Op::moveBefore fixes the order). Query::numberOps() numbers ops in program
// order into Op::scratch, for linear "is defined before" tests.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_IR_IR_H
#define SPANC_IR_IR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/iterator.h"
#include "llvm/ADT/iterator_range.h"
#include "llvm/ADT/simple_ilist.h"
#include "llvm/Support/Casting.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace spanc::ir {

class Op;
class Query;
class Module;

//===----------------------------------------------------------------------===//
// Locations
//===----------------------------------------------------------------------===//

/// Where an op came from: a file name (interned, so copying is cheap), a
/// 1-based line and a 1-based byte column. line == 0 means unknown.
struct Location {
  llvm::StringRef file;
  unsigned line = 0;
  unsigned column = 0;

  bool isKnown() const { return line != 0; }
  bool operator==(const Location &other) const {
    return file == other.file && line == other.line && column == other.column;
  }
  bool operator!=(const Location &other) const { return !(*this == other); }
};

/// Returns a copy of `name` that lives as long as the process (file names
/// are few; interning them keeps Location a small value type).
llvm::StringRef internFileName(llvm::StringRef name);

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

/// An attribute value: an integer, a float or a string.
class Attribute {
public:
  enum class Kind : uint8_t { Int, Float, String };

  Attribute(int64_t value) : value(value) {}
  Attribute(int value) : value(int64_t(value)) {}
  Attribute(double value) : value(value) {}
  Attribute(std::string value) : value(std::move(value)) {}
  Attribute(llvm::StringRef value) : value(value.str()) {}
  Attribute(const char *value) : value(std::string(value)) {}

  Kind kind() const { return static_cast<Kind>(value.index()); }
  bool isInt() const { return kind() == Kind::Int; }
  bool isFloat() const { return kind() == Kind::Float; }
  bool isString() const { return kind() == Kind::String; }

  int64_t getInt() const { return std::get<int64_t>(value); }
  double getFloat() const { return std::get<double>(value); }
  llvm::StringRef getString() const { return std::get<std::string>(value); }
  /// An int or a float, as a double (numeric options accept both).
  double getNumber() const { return isInt() ? double(getInt()) : getFloat(); }

  /// Equal kind and value; floats compare bitwise-equal values (so -0.0
  /// and 0.0 differ, and a printed float parses back to the same bits).
  bool operator==(const Attribute &other) const;
  bool operator!=(const Attribute &other) const { return !(*this == other); }

private:
  std::variant<int64_t, double, std::string> value;
};

struct NamedAttribute {
  std::string name;
  Attribute value;
};

//===----------------------------------------------------------------------===//
// Op kinds and their schemas
//===----------------------------------------------------------------------===//

enum class OpKind : uint8_t {
  // Leaves: a message or fragment text, no operands.
  System,
  User,
  Assistant,
  Fragment,
  // Joins: any number of operands.
  Cross, // ordered; later children attend to earlier ones
  Plus,  // commutative; each child is an independent span
  Seq,   // ordered, without span semantics (spnl `seq`)
  Par,   // children run in parallel (spnl `par`)
  // Model calls.
  Gen,  // one operand: the input span
  Chat, // messages as operands; sugar for gen(cross(messages))
  // Others.
  Retrieve, // no operands; a query text and {corpus, k}
  Repeat,   // one operand, {n}: n independent samples, a plus
  Monad,    // one operand, run for its cache effect only
  Yield,    // the query's result; one operand, no result
};

enum class AttrType : uint8_t { Int, Float, String };

/// An attribute an op may carry, with its type and inclusive range (for
/// numbers). Float attributes also accept integers. The frontends take an
/// op's options from here, and the verifier's checkAttribute is the one
/// rule for their values (ir/Verifier.h).
struct AttrSpec {
  const char *name;
  AttrType type;
  bool required;
  double min;
  double max;
};

/// For messages: what a spec of `type` takes ("an integer", "a number", "a
/// string") and what a value of `kind` is ("an integer", "a float", ...).
const char *describeAttrType(AttrType type);
const char *describeAttrKind(Attribute::Kind kind);

/// Where the op's text goes in the textual form.
enum class TextPosition : uint8_t {
  None,    // no text
  Leading, // span.user "text" ...
  Query,   // span.retrieve {...} query "text"
};

/// The static description of an op kind: what the verifier checks and what
/// the printer and parser use.
struct OpInfo {
  OpKind kind;
  const char *name; // without the "span." prefix
  TextPosition text;
  unsigned minOperands;
  unsigned maxOperands; // kVariadic for joins
  llvm::ArrayRef<AttrSpec> attributes;

  static constexpr unsigned kVariadic = ~0u;

  const AttrSpec *findAttribute(llvm::StringRef attrName) const;
};

/// How deep ops may nest: the longest chain of operands from an op down to
/// a leaf, counting every op on it (lets are inlined, so a chain of lets
/// each wrapping the one before nests as deep as all of them together).
/// Lowering to a plan and the frontend's inlining of lets recurse once per
/// level; at this bound they use a small part of a thread's stack, even
/// under the sanitizers. The verifier reports deeper IR at the first op
/// past the bound.
constexpr unsigned kMaxNestingDepth = 1000;

const OpInfo &getOpInfo(OpKind kind);
/// The kind for a name without "span." ("gen"), or nullopt.
std::optional<OpKind> lookupOpKind(llvm::StringRef name);
llvm::StringRef getOpName(OpKind kind);

//===----------------------------------------------------------------------===//
// Use: one operand slot
//===----------------------------------------------------------------------===//

/// An operand slot of `owner`, linked into the use-list of the op it refers
/// to. Moving a Use relinks it, so operand vectors may grow and shrink.
class Use {
public:
  Use(Op *owner, Op *value) : owner(owner) { set(value); }
  Use(Use &&other);
  Use &operator=(Use &&other);
  Use(const Use &) = delete;
  Use &operator=(const Use &) = delete;
  ~Use() { unlink(); }

  Op *get() const { return value; }
  Op *getOwner() const { return owner; }
  /// Points this slot at `newValue` (may be null while rewriting).
  void set(Op *newValue);
  Use *getNext() const { return next; }
  /// The index of this slot among its owner's operands.
  unsigned getOperandNumber() const;

private:
  void link();
  void unlink();

  Op *owner;
  Op *value = nullptr;
  Use *next = nullptr;
  Use **prev = nullptr;
};

//===----------------------------------------------------------------------===//
// Op
//===----------------------------------------------------------------------===//

class Op : public llvm::ilist_node<Op> {
public:
  ~Op();
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;

  OpKind getKind() const { return kind; }
  const OpInfo &getInfo() const { return getOpInfo(kind); }
  llvm::StringRef getName() const { return getOpName(kind); }
  Query *getParent() const { return parent; }
  Location getLoc() const { return loc; }
  void setLoc(Location newLoc) { loc = newLoc; }

  /// Classification helpers for rewrites.
  bool isLeaf() const { return kind <= OpKind::Fragment; }
  bool isMessage() const { return kind <= OpKind::Assistant; }
  bool isJoin() const { return kind >= OpKind::Cross && kind <= OpKind::Par; }
  bool hasResult() const { return kind != OpKind::Yield; }

  // Text (leaves, retrieve's query).
  llvm::StringRef getText() const { return text; }
  void setText(std::string newText) { text = std::move(newText); }

  // Operands.
  unsigned getNumOperands() const { return operands.size(); }
  Op *getOperand(unsigned index) const { return operands[index].get(); }
  void setOperand(unsigned index, Op *value) { operands[index].set(value); }
  /// Replaces all operands (O(old + new)).
  void setOperands(llvm::ArrayRef<Op *> values);
  void appendOperand(Op *value) { operands.emplace_back(this, value); }
  void insertOperand(unsigned index, Op *value);
  void eraseOperand(unsigned index);
  void dropAllOperands() { operands.clear(); }
  llvm::SmallVector<Op *, 4> getOperands() const;
  /// Iterates operand values without allocating.
  auto operandValues() const {
    return llvm::map_range(operands, [](const Use &use) { return use.get(); });
  }
  llvm::MutableArrayRef<Use> getOperandUses() { return operands; }

  // Uses of this op's result.
  class use_iterator
      : public llvm::iterator_facade_base<use_iterator,
                                          std::forward_iterator_tag, Use> {
  public:
    explicit use_iterator(Use *use = nullptr) : use(use) {}
    bool operator==(const use_iterator &other) const {
      return use == other.use;
    }
    Use &operator*() const { return *use; }
    use_iterator &operator++() {
      use = use->getNext();
      return *this;
    }

  private:
    Use *use;
  };
  llvm::iterator_range<use_iterator> uses() const {
    return {use_iterator(firstUse), use_iterator()};
  }
  /// The ops that use this one (an op appears once per operand slot).
  llvm::SmallVector<Op *, 4> getUsers() const;
  bool useEmpty() const { return firstUse == nullptr; }
  bool hasOneUse() const { return firstUse && !firstUse->getNext(); }
  unsigned getNumUses() const;
  /// Points every use of this op at `replacement`.
  void replaceAllUsesWith(Op *replacement);

  // Attributes, kept sorted by name.
  llvm::ArrayRef<NamedAttribute> getAttributes() const { return attributes; }
  const Attribute *getAttr(llvm::StringRef name) const;
  bool hasAttr(llvm::StringRef name) const { return getAttr(name); }
  std::optional<int64_t> getIntAttr(llvm::StringRef name) const;
  /// A float or int attribute as a double.
  std::optional<double> getNumberAttr(llvm::StringRef name) const;
  std::optional<llvm::StringRef> getStringAttr(llvm::StringRef name) const;
  void setAttr(llvm::StringRef name, Attribute value);
  bool removeAttr(llvm::StringRef name);
  void setAttributes(llvm::ArrayRef<NamedAttribute> newAttributes);

  // Position in the query.
  /// Unlinks this op from its query and deletes it. Its result must be
  /// unused; its operands are released.
  void erase();
  /// Moves this op (from any position of the same query) before `other`.
  void moveBefore(Op *other);

  /// A scratch number for printers and analyses (not part of the IR).
  mutable unsigned scratch = 0;

private:
  friend class Query;
  friend class Use;
  Op(OpKind kind, Location loc) : kind(kind), loc(loc) {}

  OpKind kind;
  Query *parent = nullptr;
  Location loc;
  std::string text;
  llvm::SmallVector<Use, 2> operands;
  llvm::SmallVector<NamedAttribute, 0> attributes;
  Use *firstUse = nullptr;
};

/// Casting support: `isa<GenOp>(op)` style checks are spelled with OpKind
/// tags; these small classes carry no data and only name a kind.
template <OpKind K> struct OpOfKind : public Op {
  static bool classof(const Op *op) { return op->getKind() == K; }
};
using SystemOp = OpOfKind<OpKind::System>;
using UserOp = OpOfKind<OpKind::User>;
using AssistantOp = OpOfKind<OpKind::Assistant>;
using FragmentOp = OpOfKind<OpKind::Fragment>;
using CrossOp = OpOfKind<OpKind::Cross>;
using PlusOp = OpOfKind<OpKind::Plus>;
using SeqOp = OpOfKind<OpKind::Seq>;
using ParOp = OpOfKind<OpKind::Par>;
using GenOp = OpOfKind<OpKind::Gen>;
using ChatOp = OpOfKind<OpKind::Chat>;
using RetrieveOp = OpOfKind<OpKind::Retrieve>;
using RepeatOp = OpOfKind<OpKind::Repeat>;
using MonadOp = OpOfKind<OpKind::Monad>;
using YieldOp = OpOfKind<OpKind::Yield>;

//===----------------------------------------------------------------------===//
// Query and Module
//===----------------------------------------------------------------------===//

/// `span.query @name { ... }`: owns its ops in program order; the last one
/// is a `span.yield` once the query is complete.
class Query {
public:
  using OpList = llvm::simple_ilist<Op>;

  Query(std::string name, Location loc) : name(std::move(name)), loc(loc) {}
  ~Query();
  Query(const Query &) = delete;
  Query &operator=(const Query &) = delete;

  llvm::StringRef getName() const { return name; }
  void setName(std::string newName) { name = std::move(newName); }
  Location getLoc() const { return loc; }
  void setLoc(Location newLoc) { loc = newLoc; }
  Module *getParent() const { return parent; }

  OpList &getOps() { return ops; }
  const OpList &getOps() const { return ops; }
  bool empty() const { return ops.empty(); }
  /// The number of ops (O(n): count, do not call in a loop).
  size_t size() const { return ops.size(); }
  /// The span.yield op, if the query ends with one.
  Op *getYield();
  const Op *getYield() const { return const_cast<Query *>(this)->getYield(); }
  /// The value the query yields (the yield's operand), or null.
  Op *getResult();

  /// Creates an op and inserts it before `before` (null: at the end).
  Op *createOp(OpKind kind, Location loc, llvm::ArrayRef<Op *> operands,
               Op *before = nullptr);
  /// Renumbers ops in order into their scratch field (0, 1, ...); used for
  /// "is defined before" checks in linear time.
  void numberOps() const;

private:
  friend class Op;
  friend class Module;
  std::string name;
  Location loc;
  Module *parent = nullptr;
  OpList ops;
};

/// A bulk of queries. The runtime may run them in any order it likes
/// (bulk-order sets a good one).
class Module {
public:
  Module() = default;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  std::vector<std::unique_ptr<Query>> &getQueries() { return queries; }
  const std::vector<std::unique_ptr<Query>> &getQueries() const {
    return queries;
  }
  Query *addQuery(std::string name, Location loc);
  /// Inserts an existing query at `index` (default: at the end).
  Query *insertQuery(std::unique_ptr<Query> query, size_t index = ~size_t(0));
  std::unique_ptr<Query> takeQuery(size_t index);
  Query *lookupQuery(llvm::StringRef name) const;

  /// The total number of ops of all queries.
  size_t countOps() const;

private:
  std::vector<std::unique_ptr<Query>> queries;
};

//===----------------------------------------------------------------------===//
// Builder
//===----------------------------------------------------------------------===//

/// Creates ops at an insertion point with a current location; the usual way
/// for the frontend and for passes to make IR.
class Builder {
public:
  Builder() = default;
  /// Inserts at the end of `query`.
  explicit Builder(Query *query) { setInsertionPointToEnd(query); }

  void setInsertionPointToEnd(Query *query) {
    this->query = query;
    before = nullptr;
  }
  /// Inserts before `op` (in op's query).
  void setInsertionPoint(Op *op) {
    query = op->getParent();
    before = op;
  }
  /// Inserts right after `op`.
  void setInsertionPointAfter(Op *op);
  Query *getQuery() const { return query; }

  void setLoc(Location newLoc) { loc = newLoc; }
  Location getLoc() const { return loc; }

  /// The general form; the helpers below call it.
  Op *create(OpKind kind, llvm::ArrayRef<Op *> operands = {},
             llvm::ArrayRef<NamedAttribute> attributes = {},
             llvm::StringRef text = {});

  Op *createSystem(llvm::StringRef text) {
    return create(OpKind::System, {}, {}, text);
  }
  Op *createUser(llvm::StringRef text) {
    return create(OpKind::User, {}, {}, text);
  }
  Op *createAssistant(llvm::StringRef text) {
    return create(OpKind::Assistant, {}, {}, text);
  }
  Op *createFragment(llvm::StringRef text,
                     llvm::ArrayRef<NamedAttribute> attributes = {}) {
    return create(OpKind::Fragment, {}, attributes, text);
  }
  Op *createCross(llvm::ArrayRef<Op *> operands) {
    return create(OpKind::Cross, operands);
  }
  Op *createPlus(llvm::ArrayRef<Op *> operands) {
    return create(OpKind::Plus, operands);
  }
  Op *createSeq(llvm::ArrayRef<Op *> operands) {
    return create(OpKind::Seq, operands);
  }
  Op *createPar(llvm::ArrayRef<Op *> operands) {
    return create(OpKind::Par, operands);
  }
  Op *createGen(Op *input, llvm::ArrayRef<NamedAttribute> options = {}) {
    return create(OpKind::Gen, {input}, options);
  }
  Op *createChat(llvm::ArrayRef<Op *> messages,
                 llvm::ArrayRef<NamedAttribute> options = {}) {
    return create(OpKind::Chat, messages, options);
  }
  Op *createRetrieve(llvm::StringRef corpus, int64_t k,
                     llvm::StringRef queryText) {
    return create(OpKind::Retrieve, {},
                  {{"corpus", Attribute(corpus)}, {"k", Attribute(k)}},
                  queryText);
  }
  Op *createRepeat(Op *body, int64_t n) {
    return create(OpKind::Repeat, {body}, {{"n", Attribute(n)}});
  }
  Op *createMonad(Op *body) { return create(OpKind::Monad, {body}); }
  Op *createYield(Op *value) { return create(OpKind::Yield, {value}); }

  /// Copies `op` (kind, text, attributes, location) with new operands.
  Op *clone(const Op *op, llvm::ArrayRef<Op *> operands);

private:
  Query *query = nullptr;
  Op *before = nullptr;
  Location loc;
};

//===----------------------------------------------------------------------===//
// Structural equality
//===----------------------------------------------------------------------===//

/// True when `a` and `b` have the same queries (names, order) with the same
/// ops in the same order: kinds, texts, attributes and operands (by position).
/// Locations are compared only when `compareLocations` is set.
bool isStructurallyEqual(const Module &a, const Module &b,
                         bool compareLocations = false);
bool isStructurallyEqual(const Query &a, const Query &b,
                         bool compareLocations = false);

} // namespace spanc::ir

#endif // SPANC_IR_IR_H
