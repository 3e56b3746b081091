//===- BulkOrder.cpp - Order a bulk so queries sharing fragments meet -----===//
//
// The queries of a module (a bulk) may run in any order. Queries that share
// fragments should run close in time, so the second finds the first's
// blocks still cached. Greedy nearest neighbour: keep the first query
// first, then repeatedly take the remaining query that shares the most
// fragment bytes with the one just placed (weight = the total length of the
// fragment texts both contain), ties and "shares nothing" going to the
// earliest in the current order. A bulk without shared fragments keeps its
// order, and a second run keeps the first run's order (the pick at each
// step is also the earliest of its ties).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

namespace spanc::passes {

namespace {

class BulkOrderPass : public Pass {
public:
  bool run(ir::Module &module, PassContext &) override {
    auto &queries = module.getQueries();
    size_t count = queries.size();
    if (count < 3)
      return true; // Two queries are close whatever their order.

    // Fragment text -> the queries that contain it (each once, ascending).
    llvm::StringMap<llvm::SmallVector<unsigned, 4>> postings;
    std::vector<llvm::SmallVector<
        llvm::StringMapEntry<llvm::SmallVector<unsigned, 4>> *, 8>>
        fragmentsOf(count);
    for (unsigned index = 0; index < count; ++index) {
      for (const ir::Op &op : queries[index]->getOps()) {
        if (op.getKind() != ir::OpKind::Fragment || op.getText().empty())
          continue;
        auto &entry = *postings.try_emplace(op.getText()).first;
        auto &list = entry.getValue();
        if (!list.empty() && list.back() == index)
          continue;
        list.push_back(index);
        fragmentsOf[index].push_back(&entry);
      }
    }

    std::vector<unsigned> order;
    order.reserve(count);
    std::vector<bool> placed(count, false);
    unsigned nextUnplaced = 0;
    // Weights to the last placed query, reset through `touched` only: a
    // step costs what the last query shares, not the size of the bulk.
    std::vector<uint64_t> weight(count, 0);
    std::vector<unsigned> touched;
    auto place = [&](unsigned index) {
      order.push_back(index);
      placed[index] = true;
      while (nextUnplaced < count && placed[nextUnplaced])
        ++nextUnplaced;
    };
    place(0);
    while (order.size() < count) {
      for (auto *entry : fragmentsOf[order.back()]) {
        // Placed queries leave the posting lists as they are met, so a
        // fragment shared by m queries costs O(m) per visit, shrinking.
        auto &list = entry->getValue();
        llvm::erase_if(list, [&](unsigned other) { return placed[other]; });
        for (unsigned other : list) {
          if (!weight[other])
            touched.push_back(other);
          weight[other] += entry->getKey().size();
        }
      }
      unsigned best = nextUnplaced;
      uint64_t bestWeight = 0;
      for (unsigned index : touched) {
        if (weight[index] > bestWeight ||
            (weight[index] == bestWeight && index < best)) {
          best = index;
          bestWeight = weight[index];
        }
        weight[index] = 0;
      }
      touched.clear();
      place(best);
    }

    std::vector<std::unique_ptr<ir::Query>> reordered;
    reordered.reserve(count);
    for (unsigned index : order)
      reordered.push_back(std::move(queries[index]));
    queries = std::move(reordered);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createBulkOrderPass() {
  return std::make_unique<BulkOrderPass>();
}

static PassRegistration registration(
    "bulk-order",
    "order the queries of a bulk so that queries sharing fragments run "
    "close together",
    createBulkOrderPass);

} // namespace spanc::passes
