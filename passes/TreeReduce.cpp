//===- TreeReduce.cpp - A wide gen over + becomes a k-ary tree of gens ----===//
//
// Attention locality, opt-in: a gen with `reduce = k` (or every gen, with
// --tree-reduce=k) whose input is a + of n > k children, alone or inside a
// ⋈ with the instructions around it, becomes a tree: the children are cut
// into ceil(n/k) balanced groups, each group goes to a gen with the same
// instructions and options, and the gen's outputs are the children of the
// next round, until at most k remain for the original gen (ceil(log_k n)
// rounds; a group of one passes to the next round unchanged). Leaves of a
// round are independent, so they run in parallel.
//
// A repeat(n) child counts as n children (its samples); a group that takes
// m of them gets repeat(m) of the same body, so every sample stays an
// independent draw. Every gen of the tree carries `reduce = k`, which makes
// the pass idempotent and tells plus-distribute not to widen them. An input
// with several + children, or none, is left alone.
//
//===----------------------------------------------------------------------===//

#include "passes/DeadOps.h"
#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

namespace spanc::passes {

namespace {

using ir::Op;
using ir::OpKind;

/// More children than this are not expanded (a repeat(10^9) would make
/// hundreds of millions of gens); the gen is left alone with a warning.
constexpr uint64_t MaxFanIn = 1u << 16;

bool isSum(const Op *op) {
  return op->getKind() == OpKind::Plus || op->getKind() == OpKind::Repeat;
}

/// One child of the +: a value, or one fresh sample of a repeat's body.
struct Item {
  Op *value;
  bool isSample;
};

class TreeReducePass : public Pass {
public:
  bool run(ir::Module &module, PassContext &context) override {
    unsigned defaultFanIn = context.getOptions().treeReduce;
    if (defaultFanIn == 1) {
      context.getDiagnostics().error(
          ir::Location(), "--tree-reduce must be at least 2 (or 0: off)");
      return false;
    }
    llvm::SmallVector<Op *, 16> gens;
    for (auto &query : module.getQueries()) {
      gens.clear();
      for (Op &op : query->getOps())
        if (op.getKind() == OpKind::Gen)
          gens.push_back(&op);
      for (Op *gen : gens) {
        std::optional<int64_t> fanIn = gen->getIntAttr("reduce");
        if (!fanIn && defaultFanIn)
          fanIn = defaultFanIn;
        if (fanIn && *fanIn >= 2)
          reduce(gen, static_cast<unsigned>(*fanIn), context);
      }
    }
    return true;
  }

private:
  static void reduce(Op *gen, unsigned fanIn, PassContext &context) {
    // Where the + is: the whole input, or the one sum among a ⋈'s children.
    Op *input = gen->getOperand(0);
    llvm::SmallVector<Op *, 4> before, after;
    Op *sum = nullptr;
    if (isSum(input)) {
      sum = input;
    } else if (input->getKind() == OpKind::Cross) {
      for (Op *child : input->operandValues()) {
        if (!isSum(child)) {
          (sum ? after : before).push_back(child);
          continue;
        }
        if (sum)
          return; // Two sums: which one to reduce is not ours to guess.
        sum = child;
      }
    }
    if (!sum)
      return;

    llvm::SmallVector<Item, 16> items;
    uint64_t count = 0;
    auto addChild = [&](Op *child) {
      if (child->getKind() != OpKind::Repeat) {
        ++count;
        if (count <= MaxFanIn)
          items.push_back({child, false});
        return;
      }
      uint64_t samples = child->getIntAttr("n").value_or(1);
      count += samples;
      for (uint64_t i = 0; i < samples && count <= MaxFanIn; ++i)
        items.push_back({child->getOperand(0), true});
    };
    if (sum->getKind() == OpKind::Repeat)
      addChild(sum);
    else
      for (Op *child : sum->operandValues())
        addChild(child);
    if (count <= fanIn)
      return;
    if (count > MaxFanIn) {
      context.getDiagnostics().warning(
          gen->getLoc(), "tree-reduce: fan-in " + llvm::Twine(count) +
                             " is too large to expand; left as one gen");
      return;
    }

    ir::Builder builder;
    builder.setInsertionPoint(gen);
    builder.setLoc(gen->getLoc());
    llvm::SmallVector<ir::NamedAttribute, 8> options(
        gen->getAttributes().begin(), gen->getAttributes().end());
    auto makeInput = [&](llvm::ArrayRef<Item> group) {
      Op *plus = builder.createPlus(materialize(group, builder));
      if (input == sum)
        return plus;
      llvm::SmallVector<Op *, 8> children(before.begin(), before.end());
      children.push_back(plus);
      children.append(after.begin(), after.end());
      return builder.createCross(children);
    };

    gen->setAttr("reduce", ir::Attribute(int64_t(fanIn)));
    while (items.size() > fanIn) {
      size_t groups = (items.size() + fanIn - 1) / fanIn;
      llvm::SmallVector<Item, 16> next;
      size_t start = 0;
      for (size_t group = 0; group < groups; ++group) {
        // Balanced: sizes differ by at most one.
        size_t size = items.size() / groups + (group < items.size() % groups);
        llvm::ArrayRef<Item> members(items.data() + start, size);
        start += size;
        if (size == 1) {
          next.push_back(members[0]);
          continue;
        }
        Op *partial = builder.createGen(makeInput(members), options);
        partial->setAttr("reduce", ir::Attribute(int64_t(fanIn)));
        next.push_back({partial, false});
      }
      items = std::move(next);
    }
    gen->setOperand(0, makeInput(items));
    eraseDeadOps({input});
  }

  /// The children of a + for `group`: values as they are, runs of samples
  /// of one body as one repeat(m) of it.
  static llvm::SmallVector<Op *, 8> materialize(llvm::ArrayRef<Item> group,
                                                ir::Builder &builder) {
    llvm::SmallVector<Op *, 8> children;
    for (size_t i = 0; i < group.size();) {
      if (!group[i].isSample) {
        children.push_back(group[i++].value);
        continue;
      }
      size_t end = i;
      while (end < group.size() && group[end].isSample &&
             group[end].value == group[i].value)
        ++end;
      children.push_back(
          builder.createRepeat(group[i].value, static_cast<int64_t>(end - i)));
      i = end;
    }
    return children;
  }
};

} // namespace

std::unique_ptr<Pass> createTreeReducePass() {
  return std::make_unique<TreeReducePass>();
}

static PassRegistration registration(
    "tree-reduce",
    "a gen over a + of n > k children (reduce = k, --tree-reduce=k) becomes "
    "a k-ary tree of gens",
    createTreeReducePass);

} // namespace spanc::passes
