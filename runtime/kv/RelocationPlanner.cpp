//===- RelocationPlanner.cpp - CIDRA: safe ReRoPE relocation per step -----===//

#include "runtime/kv/RelocationPlanner.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <string>

namespace spanc::kv {

size_t RelocationPlan::numOps() const {
  size_t count = 0;
  for (const auto &batch : batches)
    count += batch.size();
  return count;
}

llvm::SmallVector<llvm::SmallVector<uint32_t, 4>, 8>
stronglyConnectedComponents(
    llvm::ArrayRef<llvm::SmallVector<uint32_t, 2>> successors) {
  const uint32_t numNodes = uint32_t(successors.size());
  constexpr uint32_t Unvisited = ~uint32_t(0);
  std::vector<uint32_t> index(numNodes, Unvisited), lowLink(numNodes, 0);
  std::vector<uint8_t> onStack(numNodes, 0);
  std::vector<uint32_t> stack;
  // The explicit call stack: a node and the next successor to visit.
  std::vector<std::pair<uint32_t, uint32_t>> frames;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 4>, 8> components;
  uint32_t counter = 0;
  auto visit = [&](uint32_t node) {
    index[node] = lowLink[node] = counter++;
    stack.push_back(node);
    onStack[node] = 1;
    frames.push_back({node, 0});
  };
  for (uint32_t root = 0; root < numNodes; ++root) {
    if (index[root] != Unvisited)
      continue;
    visit(root);
    while (!frames.empty()) {
      auto &[node, next] = frames.back();
      if (next < successors[node].size()) {
        uint32_t successor = successors[node][next++];
        if (index[successor] == Unvisited)
          visit(successor); // invalidates `node`/`next`; re-read next turn
        else if (onStack[successor])
          lowLink[node] = std::min(lowLink[node], index[successor]);
        continue;
      }
      uint32_t finished = node;
      frames.pop_back();
      if (lowLink[finished] == index[finished]) {
        llvm::SmallVector<uint32_t, 4> component;
        uint32_t member;
        do {
          member = stack.back();
          stack.pop_back();
          onStack[member] = 0;
          component.push_back(member);
        } while (member != finished);
        components.push_back(std::move(component));
      }
      if (!frames.empty()) {
        uint32_t parent = frames.back().first;
        lowLink[parent] = std::min(lowLink[parent], lowLink[finished]);
      }
    }
  }
  return components;
}

namespace {

llvm::Error inputError(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 "relocation plan: %s", message.str().c_str());
}

/// The distinct positions a block is wanted at, with who wants each.
struct BlockWants {
  BlockId block = InvalidBlock;
  llvm::SmallVector<int64_t, 2> positions; // in order of first appearance
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 2> requesters;
  int inPlace = -1; // index into positions rotated in place, or -1
};

} // namespace

llvm::Expected<RelocationPlan>
planRelocations(BlockPool &pool, llvm::ArrayRef<RelocationRequest> requests,
                const llvm::DenseSet<BlockId> &readInPlace,
                llvm::ArrayRef<RelocationOp> moves,
                const RelocationPlannerOptions &options) {
  const uint32_t numBlocks = pool.numBlocks();
  // 1. Validate and group by block; nothing in the pool changes until every
  //    check passed and the blocks were obtained.
  llvm::SmallVector<BlockWants, 8> wants;
  llvm::DenseMap<BlockId, uint32_t> wantsOf;
  for (uint32_t index = 0; index < requests.size(); ++index) {
    const RelocationRequest &request = requests[index];
    if (request.block >= numBlocks || pool.refCount(request.block) == 0)
      return inputError("request " + llvm::Twine(request.request) +
                        " relocates block " + llvm::Twine(request.block) +
                        ", which it holds no reference to");
    auto [entry, inserted] =
        wantsOf.try_emplace(request.block, uint32_t(wants.size()));
    if (inserted) {
      wants.emplace_back();
      wants.back().block = request.block;
    }
    BlockWants &blockWants = wants[entry->second];
    auto found = llvm::find(blockWants.positions, request.wantedPosition);
    size_t slot = size_t(found - blockWants.positions.begin());
    if (found == blockWants.positions.end()) {
      blockWants.positions.push_back(request.wantedPosition);
      blockWants.requesters.emplace_back();
    }
    blockWants.requesters[slot].push_back(index);
  }
  llvm::DenseSet<BlockId> movedTo;
  for (const RelocationOp &move : moves) {
    if (move.source >= numBlocks || move.destination >= numBlocks)
      return inputError("move " + llvm::Twine(move.source) + " -> " +
                        llvm::Twine(move.destination) +
                        " names a block outside the pool");
    if (move.source == move.destination)
      return inputError("move " + llvm::Twine(move.source) +
                        " onto itself: ask for it as a relocation request");
    if (pool.refCount(move.destination) == 0 || pool.refCount(move.source) == 0)
      return inputError("move " + llvm::Twine(move.source) + " -> " +
                        llvm::Twine(move.destination) +
                        " touches an unreferenced block");
    if (!movedTo.insert(move.destination).second)
      return inputError("block " + llvm::Twine(move.destination) +
                        " is the destination of two moves");
    if (wantsOf.count(move.destination) || readInPlace.count(move.destination))
      return inputError("block " + llvm::Twine(move.destination) +
                        " is overwritten by a move but read or relocated "
                        "in this step");
  }

  // 2. Duplication: one wanted position may turn the block in place when
  //    no one reads it where it is; every other position gets a copy.
  unsigned numCopies = 0;
  for (BlockWants &blockWants : wants) {
    const int64_t current = pool.storedPosition(blockWants.block);
    bool pinned = readInPlace.count(blockWants.block) != 0;
    for (int64_t position : blockWants.positions)
      pinned |= position == current;
    if (!pinned) {
      // The position most requests want stays in place (fewest copies).
      size_t best = 0;
      for (size_t slot = 1; slot < blockWants.positions.size(); ++slot)
        if (blockWants.requesters[slot].size() >
            blockWants.requesters[best].size())
          best = slot;
      blockWants.inPlace = int(best);
    }
    for (size_t slot = 0; slot < blockWants.positions.size(); ++slot)
      if (int(slot) != blockWants.inPlace &&
          blockWants.positions[slot] != current)
        ++numCopies;
  }

  // 3. Cycles among the explicit moves: move A -> move B when B overwrites
  //    what A reads. Copies write fresh blocks and in-place turns write
  //    their own, so only explicit moves can close a cycle.
  llvm::DenseMap<BlockId, uint32_t> moveWriting;
  for (uint32_t index = 0; index < moves.size(); ++index)
    moveWriting[moves[index].destination] = index;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 8> moveGraph(moves.size());
  for (uint32_t index = 0; index < moves.size(); ++index) {
    auto writer = moveWriting.find(moves[index].source);
    if (writer != moveWriting.end())
      moveGraph[index].push_back(writer->second);
  }
  auto components = stronglyConnectedComponents(moveGraph);
  unsigned numTemporaries = 0;
  for (const auto &component : components)
    if (component.size() > 1)
      numTemporaries += component.size() <= options.maxBatchedCycle
                            ? unsigned(component.size())
                            : 1;

  // 4. All the blocks at once, or nothing changes.
  auto fresh = pool.allocate(numCopies + numTemporaries);
  if (!fresh)
    return llvm::createStringError(
        std::errc::not_enough_memory,
        "relocation plan needs %u copies and %u temporaries: %s", numCopies,
        numTemporaries, llvm::toString(fresh.takeError()).c_str());
  size_t nextFresh = 0;

  RelocationPlan plan;
  llvm::SmallVector<RelocationOp, 16> ops;
  // Extra read-after-write orderings (temporaries), as (before, after).
  llvm::SmallVector<std::pair<uint32_t, uint32_t>, 8> orderings;
  llvm::DenseSet<BlockId> temporaries;
  // New metadata, computed from the contents before the plan.
  struct Effect {
    BlockId block;
    int64_t storedPosition;
    unsigned numTokens;
  };
  llvm::SmallVector<Effect, 16> effects;
  llvm::SmallVector<BlockId, 8> toFree, toTouch;

  for (BlockWants &blockWants : wants) {
    const BlockId block = blockWants.block;
    const int64_t current = pool.storedPosition(block);
    for (size_t slot = 0; slot < blockWants.positions.size(); ++slot) {
      const int64_t position = blockWants.positions[slot];
      if (position == current)
        continue; // already where it is wanted
      if (int(slot) == blockWants.inPlace) {
        ops.push_back({block, block, position - current});
        effects.push_back({block, position, pool.numTokens(block)});
        ++plan.numInPlace;
        continue;
      }
      BlockId copy = (*fresh)[nextFresh++];
      ops.push_back({block, copy, position - current});
      effects.push_back({copy, position, pool.numTokens(block)});
      ++plan.numCopies;
      // The allocation's reference goes to the first requester; each
      // requester's reference on the original is dropped.
      const auto &requesters = blockWants.requesters[slot];
      for (size_t i = 0; i < requesters.size(); ++i) {
        const RelocationRequest &request = requests[requesters[i]];
        plan.rebindings.push_back({request.request, request.tag, block, copy});
        if (i > 0)
          toTouch.push_back(copy);
        toFree.push_back(block);
      }
    }
  }

  for (const RelocationOp &move : moves)
    effects.push_back({move.destination,
                       pool.storedPosition(move.source) + move.delta,
                       pool.numTokens(move.source)});
  for (const auto &component : components) {
    if (component.size() == 1) {
      ops.push_back(moves[component.front()]);
      continue;
    }
    ++plan.numCycles;
    if (component.size() <= options.maxBatchedCycle) {
      // Save every source (turned) into its own temporary, then restore:
      // two passes for the whole cycle.
      for (uint32_t member : component) {
        const RelocationOp &move = moves[member];
        BlockId temporary = (*fresh)[nextFresh++];
        temporaries.insert(temporary);
        plan.temporaries.push_back(temporary);
        uint32_t save = uint32_t(ops.size());
        ops.push_back({move.source, temporary, move.delta});
        orderings.push_back({save, uint32_t(ops.size())});
        ops.push_back({temporary, move.destination, 0});
      }
      continue;
    }
    // Serial path: park one source, run the rest of the cycle in its
    // dependency order, finish from the parked copy.
    ++plan.numSerialCycles;
    const RelocationOp &first = moves[component.front()];
    BlockId temporary = (*fresh)[nextFresh++];
    temporaries.insert(temporary);
    plan.temporaries.push_back(temporary);
    uint32_t save = uint32_t(ops.size());
    ops.push_back({first.source, temporary, 0});
    orderings.push_back({save, uint32_t(ops.size())});
    ops.push_back({temporary, first.destination, first.delta});
    for (size_t i = 1; i < component.size(); ++i)
      ops.push_back(moves[component[i]]);
  }

  // 5. Level the ops: an op that overwrites a block runs after every op
  //    that reads it (temporaries excepted: their reader follows their
  //    writer through `orderings`).
  llvm::DenseMap<BlockId, uint32_t> writerOf;
  for (uint32_t index = 0; index < ops.size(); ++index)
    if (!temporaries.count(ops[index].destination))
      writerOf[ops[index].destination] = index;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 16> after(ops.size());
  std::vector<uint32_t> numBefore(ops.size(), 0);
  auto order = [&](uint32_t before, uint32_t later) {
    after[before].push_back(later);
    ++numBefore[later];
  };
  for (uint32_t index = 0; index < ops.size(); ++index) {
    if (temporaries.count(ops[index].source))
      continue;
    auto writer = writerOf.find(ops[index].source);
    if (writer != writerOf.end() && writer->second != index)
      order(index, writer->second);
  }
  for (auto [before, later] : orderings)
    order(before, later);
  std::vector<uint32_t> level(ops.size(), 0), ready;
  for (uint32_t index = 0; index < ops.size(); ++index)
    if (numBefore[index] == 0)
      ready.push_back(index);
  size_t numLeveled = 0;
  while (!ready.empty()) {
    uint32_t index = ready.back();
    ready.pop_back();
    ++numLeveled;
    if (plan.batches.size() <= level[index])
      plan.batches.resize(level[index] + 1);
    plan.batches[level[index]].push_back(ops[index]);
    for (uint32_t later : after[index]) {
      level[later] = std::max(level[later], level[index] + 1);
      if (--numBefore[later] == 0)
        ready.push_back(later);
    }
  }
  if (numLeveled != ops.size()) {
    // Cannot happen after cycle breaking; keep the pool as it was.
    pool.free(*fresh);
    return llvm::createStringError(std::errc::state_not_recoverable,
                                   "relocation plan: a cycle survived");
  }

  // 6. Bookkeeping, now that the plan stands.
  for (const RelocationOp &move : moves)
    pool.uncache(move.destination);
  for (const Effect &effect : effects) {
    pool.setStoredPosition(effect.block, effect.storedPosition);
    pool.setNumTokens(effect.block, effect.numTokens);
  }
  pool.touch(toTouch);
  pool.free(toFree);
  return plan;
}

} // namespace spanc::kv
