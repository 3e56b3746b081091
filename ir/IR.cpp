//===- IR.cpp - The span IR: ops, queries, modules, attributes ------------===//

#include "ir/IR.h"

#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <mutex>

namespace spanc::ir {

llvm::StringRef internFileName(llvm::StringRef name) {
  static std::mutex mutex;
  static llvm::StringSet<> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->getKey();
}

bool Attribute::operator==(const Attribute &other) const {
  if (kind() != other.kind())
    return false;
  switch (kind()) {
  case Kind::Int:
    return getInt() == other.getInt();
  case Kind::Float: {
    double a = getFloat(), b = other.getFloat();
    return std::memcmp(&a, &b, sizeof(double)) == 0;
  }
  case Kind::String:
    return getString() == other.getString();
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Schemas
//===----------------------------------------------------------------------===//

namespace {
constexpr double kMaxInt = 9.0e18;
constexpr double kMaxCount = 1.0e9;
constexpr double kHuge = std::numeric_limits<double>::max();

// gen and chat share their options (docs/ARCHITECTURE.md, "The IR").
const AttrSpec kModelCallAttrs[] = {
    {"max_tokens", AttrType::Int, false, 0, kMaxCount},
    {"model", AttrType::String, false, 0, 0},
    {"reduce", AttrType::Int, false, 2, kMaxCount},
    {"seed", AttrType::Int, false, -kMaxInt, kMaxInt},
    {"stop", AttrType::String, false, 0, 0},
    {"temperature", AttrType::Float, false, 0, 2},
    {"top_k", AttrType::Int, false, 0, kMaxCount},
    {"top_p", AttrType::Float, false, 0, 1},
};
// Fragments made by desugar-retrieve say where they came from.
const AttrSpec kFragmentAttrs[] = {
    {"corpus", AttrType::String, false, 0, 0},
    {"file", AttrType::String, false, 0, 0},
    {"offset", AttrType::Int, false, 0, kMaxInt},
    {"score", AttrType::Float, false, -kHuge, kHuge},
};
const AttrSpec kRetrieveAttrs[] = {
    {"corpus", AttrType::String, true, 0, 0},
    {"k", AttrType::Int, true, 1, 1.0e6},
};
const AttrSpec kRepeatAttrs[] = {
    {"n", AttrType::Int, true, 1, kMaxCount},
};

constexpr unsigned V = OpInfo::kVariadic;
const OpInfo kOpInfos[] = {
    {OpKind::System, "system", TextPosition::Leading, 0, 0, {}},
    {OpKind::User, "user", TextPosition::Leading, 0, 0, {}},
    {OpKind::Assistant, "assistant", TextPosition::Leading, 0, 0, {}},
    {OpKind::Fragment, "fragment", TextPosition::Leading, 0, 0, kFragmentAttrs},
    {OpKind::Cross, "cross", TextPosition::None, 0, V, {}},
    // A plus joins at least one span: one written with none has lost its
    // candidates (an empty span is an empty cross).
    {OpKind::Plus, "plus", TextPosition::None, 1, V, {}},
    {OpKind::Seq, "seq", TextPosition::None, 0, V, {}},
    {OpKind::Par, "par", TextPosition::None, 0, V, {}},
    {OpKind::Gen, "gen", TextPosition::None, 1, 1, kModelCallAttrs},
    {OpKind::Chat, "chat", TextPosition::None, 0, V, kModelCallAttrs},
    {OpKind::Retrieve, "retrieve", TextPosition::Query, 0, 0, kRetrieveAttrs},
    {OpKind::Repeat, "repeat", TextPosition::None, 1, 1, kRepeatAttrs},
    {OpKind::Monad, "monad", TextPosition::None, 1, 1, {}},
    {OpKind::Yield, "yield", TextPosition::None, 1, 1, {}},
};
} // namespace

const char *describeAttrType(AttrType type) {
  switch (type) {
  case AttrType::Int:
    return "an integer";
  case AttrType::Float:
    return "a number";
  case AttrType::String:
    return "a string";
  }
  return "?";
}

const char *describeAttrKind(Attribute::Kind kind) {
  switch (kind) {
  case Attribute::Kind::Int:
    return "an integer";
  case Attribute::Kind::Float:
    return "a float";
  case Attribute::Kind::String:
    return "a string";
  }
  return "?";
}

const AttrSpec *OpInfo::findAttribute(llvm::StringRef attrName) const {
  for (const AttrSpec &spec : attributes)
    if (attrName == spec.name)
      return &spec;
  return nullptr;
}

const OpInfo &getOpInfo(OpKind kind) {
  const OpInfo &info = kOpInfos[static_cast<unsigned>(kind)];
  assert(info.kind == kind && "kOpInfos out of order");
  return info;
}

std::optional<OpKind> lookupOpKind(llvm::StringRef name) {
  for (const OpInfo &info : kOpInfos)
    if (name == info.name)
      return info.kind;
  return std::nullopt;
}

llvm::StringRef getOpName(OpKind kind) { return getOpInfo(kind).name; }

//===----------------------------------------------------------------------===//
// Use
//===----------------------------------------------------------------------===//

void Use::link() {
  if (!value)
    return;
  next = value->firstUse;
  if (next)
    next->prev = &next;
  prev = &value->firstUse;
  value->firstUse = this;
}

void Use::unlink() {
  if (!prev)
    return;
  *prev = next;
  if (next)
    next->prev = prev;
  next = nullptr;
  prev = nullptr;
}

void Use::set(Op *newValue) {
  unlink();
  value = newValue;
  link();
}

Use::Use(Use &&other) : owner(other.owner) {
  // Take over other's place in the use-list.
  value = other.value;
  next = other.next;
  prev = other.prev;
  if (prev) {
    *prev = this;
    if (next)
      next->prev = &next;
  }
  other.value = nullptr;
  other.next = nullptr;
  other.prev = nullptr;
}

Use &Use::operator=(Use &&other) {
  if (this == &other)
    return *this;
  unlink();
  owner = other.owner;
  value = other.value;
  next = other.next;
  prev = other.prev;
  if (prev) {
    *prev = this;
    if (next)
      next->prev = &next;
  }
  other.value = nullptr;
  other.next = nullptr;
  other.prev = nullptr;
  return *this;
}

unsigned Use::getOperandNumber() const {
  return static_cast<unsigned>(this - owner->operands.data());
}

//===----------------------------------------------------------------------===//
// Op
//===----------------------------------------------------------------------===//

Op::~Op() {
  operands.clear();
  // Whoever still refers to this op now refers to nothing; the verifier
  // reports such operands instead of reading freed memory.
  while (firstUse)
    firstUse->set(nullptr);
}

void Op::setOperands(llvm::ArrayRef<Op *> values) {
  operands.clear();
  operands.reserve(values.size());
  for (Op *value : values)
    operands.emplace_back(this, value);
}

void Op::insertOperand(unsigned index, Op *value) {
  operands.insert(operands.begin() + index, Use(this, value));
}

void Op::eraseOperand(unsigned index) {
  operands.erase(operands.begin() + index);
}

llvm::SmallVector<Op *, 4> Op::getOperands() const {
  llvm::SmallVector<Op *, 4> result;
  result.reserve(operands.size());
  for (const Use &use : operands)
    result.push_back(use.get());
  return result;
}

llvm::SmallVector<Op *, 4> Op::getUsers() const {
  llvm::SmallVector<Op *, 4> result;
  for (Use &use : uses())
    result.push_back(use.getOwner());
  return result;
}

unsigned Op::getNumUses() const {
  unsigned count = 0;
  for (Use *use = firstUse; use; use = use->getNext())
    ++count;
  return count;
}

void Op::replaceAllUsesWith(Op *replacement) {
  if (replacement == this)
    return;
  while (firstUse)
    firstUse->set(replacement);
}

const Attribute *Op::getAttr(llvm::StringRef name) const {
  for (const NamedAttribute &attr : attributes)
    if (attr.name == name)
      return &attr.value;
  return nullptr;
}

std::optional<int64_t> Op::getIntAttr(llvm::StringRef name) const {
  const Attribute *attr = getAttr(name);
  if (!attr || !attr->isInt())
    return std::nullopt;
  return attr->getInt();
}

std::optional<double> Op::getNumberAttr(llvm::StringRef name) const {
  const Attribute *attr = getAttr(name);
  if (!attr || attr->isString())
    return std::nullopt;
  return attr->getNumber();
}

std::optional<llvm::StringRef> Op::getStringAttr(llvm::StringRef name) const {
  const Attribute *attr = getAttr(name);
  if (!attr || !attr->isString())
    return std::nullopt;
  return attr->getString();
}

void Op::setAttr(llvm::StringRef name, Attribute value) {
  auto it =
      std::lower_bound(attributes.begin(), attributes.end(), name,
                       [](const NamedAttribute &attr, llvm::StringRef key) {
                         return llvm::StringRef(attr.name) < key;
                       });
  if (it != attributes.end() && it->name == name) {
    it->value = std::move(value);
    return;
  }
  attributes.insert(it, NamedAttribute{name.str(), std::move(value)});
}

bool Op::removeAttr(llvm::StringRef name) {
  auto it = llvm::find_if(attributes, [&](const NamedAttribute &attr) {
    return attr.name == name;
  });
  if (it == attributes.end())
    return false;
  attributes.erase(it);
  return true;
}

void Op::setAttributes(llvm::ArrayRef<NamedAttribute> newAttributes) {
  attributes.clear();
  for (const NamedAttribute &attr : newAttributes)
    setAttr(attr.name, attr.value);
}

void Op::erase() {
  assert(useEmpty() && "erasing an op whose result is still used");
  operands.clear();
  if (parent)
    parent->ops.remove(*this);
  delete this;
}

void Op::moveBefore(Op *other) {
  assert(parent && parent == other->parent && "ops of different queries");
  if (this == other)
    return;
  parent->ops.remove(*this);
  parent->ops.insert(other->getIterator(), *this);
}

//===----------------------------------------------------------------------===//
// Query and Module
//===----------------------------------------------------------------------===//

Query::~Query() {
  // Operands first, so that no use-list points at a deleted op.
  for (Op &op : ops)
    op.operands.clear();
  // ~Op detaches users left in other queries (ill-formed IR that a pass
  // may leave behind; the verifier reports it, and teardown stays safe).
  ops.clearAndDispose([](Op *op) { delete op; });
}

Op *Query::getYield() {
  if (ops.empty() || ops.back().getKind() != OpKind::Yield)
    return nullptr;
  return &ops.back();
}

Op *Query::getResult() {
  Op *yield = getYield();
  return yield && yield->getNumOperands() == 1 ? yield->getOperand(0) : nullptr;
}

Op *Query::createOp(OpKind kind, Location loc, llvm::ArrayRef<Op *> operands,
                    Op *before) {
  Op *op = new Op(kind, loc);
  op->parent = this;
  op->setOperands(operands);
  if (before)
    ops.insert(before->getIterator(), *op);
  else
    ops.push_back(*op);
  return op;
}

void Query::numberOps() const {
  unsigned index = 0;
  for (const Op &op : ops)
    op.scratch = index++;
}

Query *Module::addQuery(std::string name, Location loc) {
  return insertQuery(std::make_unique<Query>(std::move(name), loc));
}

Query *Module::insertQuery(std::unique_ptr<Query> query, size_t index) {
  query->parent = this;
  Query *result = query.get();
  if (index >= queries.size())
    queries.push_back(std::move(query));
  else
    queries.insert(queries.begin() + index, std::move(query));
  return result;
}

std::unique_ptr<Query> Module::takeQuery(size_t index) {
  std::unique_ptr<Query> query = std::move(queries[index]);
  queries.erase(queries.begin() + index);
  query->parent = nullptr;
  return query;
}

Query *Module::lookupQuery(llvm::StringRef name) const {
  for (const auto &query : queries)
    if (query->getName() == name)
      return query.get();
  return nullptr;
}

size_t Module::countOps() const {
  size_t count = 0;
  for (const auto &query : queries)
    count += query->size();
  return count;
}

//===----------------------------------------------------------------------===//
// Builder
//===----------------------------------------------------------------------===//

void Builder::setInsertionPointAfter(Op *op) {
  query = op->getParent();
  auto next = std::next(op->getIterator());
  before = next == query->getOps().end() ? nullptr : &*next;
}

Op *Builder::create(OpKind kind, llvm::ArrayRef<Op *> operands,
                    llvm::ArrayRef<NamedAttribute> attributes,
                    llvm::StringRef text) {
  assert(query && "builder without an insertion point");
  Op *op = query->createOp(kind, loc, operands, before);
  if (!attributes.empty())
    op->setAttributes(attributes);
  if (!text.empty())
    op->setText(text.str());
  return op;
}

Op *Builder::clone(const Op *op, llvm::ArrayRef<Op *> operands) {
  Location saved = loc;
  loc = op->getLoc();
  Op *copy =
      create(op->getKind(), operands, op->getAttributes(), op->getText());
  loc = saved;
  return copy;
}

//===----------------------------------------------------------------------===//
// Structural equality
//===----------------------------------------------------------------------===//

bool isStructurallyEqual(const Query &a, const Query &b,
                         bool compareLocations) {
  if (a.getName() != b.getName())
    return false;
  if (compareLocations && a.getLoc() != b.getLoc())
    return false;
  a.numberOps();
  b.numberOps();
  auto itA = a.getOps().begin(), endA = a.getOps().end();
  auto itB = b.getOps().begin(), endB = b.getOps().end();
  for (; itA != endA && itB != endB; ++itA, ++itB) {
    const Op &opA = *itA, &opB = *itB;
    if (opA.getKind() != opB.getKind() || opA.getText() != opB.getText() ||
        opA.getNumOperands() != opB.getNumOperands())
      return false;
    if (compareLocations && opA.getLoc() != opB.getLoc())
      return false;
    llvm::ArrayRef<NamedAttribute> attrsA = opA.getAttributes(),
                                   attrsB = opB.getAttributes();
    if (attrsA.size() != attrsB.size())
      return false;
    for (size_t i = 0; i < attrsA.size(); ++i)
      if (attrsA[i].name != attrsB[i].name ||
          attrsA[i].value != attrsB[i].value)
        return false;
    for (unsigned i = 0; i < opA.getNumOperands(); ++i) {
      const Op *operandA = opA.getOperand(i), *operandB = opB.getOperand(i);
      if (!operandA || !operandB) {
        if (operandA != operandB)
          return false;
        continue;
      }
      // Operands are compared by position in their query.
      if (operandA->getParent() != &a || operandB->getParent() != &b ||
          operandA->scratch != operandB->scratch)
        return false;
    }
  }
  return itA == endA && itB == endB;
}

bool isStructurallyEqual(const Module &a, const Module &b,
                         bool compareLocations) {
  if (a.getQueries().size() != b.getQueries().size())
    return false;
  for (size_t i = 0; i < a.getQueries().size(); ++i)
    if (!isStructurallyEqual(*a.getQueries()[i], *b.getQueries()[i],
                             compareLocations))
      return false;
  return true;
}

} // namespace spanc::ir
