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

/// The requests grouped by block, and where each block's group is.
struct GroupedWants {
  llvm::SmallVector<BlockWants, 8> wants;
  llvm::DenseMap<BlockId, uint32_t> wantsOf;
};

/// Phase 1a: checks the requests and groups their wanted positions per
/// block. Reads the pool only: nothing changes until every check passed.
llvm::Expected<GroupedWants>
groupWants(const BlockPool &pool, llvm::ArrayRef<RelocationRequest> requests) {
  const uint32_t numBlocks = pool.numBlocks();
  GroupedWants grouped;
  for (uint32_t index = 0; index < requests.size(); ++index) {
    const RelocationRequest &request = requests[index];
    if (request.block >= numBlocks || pool.refCount(request.block) == 0)
      return inputError("request " + llvm::Twine(request.request) +
                        " relocates block " + llvm::Twine(request.block) +
                        ", which it holds no reference to");
    auto [entry, inserted] = grouped.wantsOf.try_emplace(
        request.block, uint32_t(grouped.wants.size()));
    if (inserted) {
      grouped.wants.emplace_back();
      grouped.wants.back().block = request.block;
    }
    BlockWants &blockWants = grouped.wants[entry->second];
    auto found = llvm::find(blockWants.positions, request.wantedPosition);
    size_t slot = size_t(found - blockWants.positions.begin());
    if (found == blockWants.positions.end()) {
      blockWants.positions.push_back(request.wantedPosition);
      blockWants.requesters.emplace_back();
    }
    blockWants.requesters[slot].push_back(index);
  }
  return grouped;
}

/// Phase 1b: the explicit moves must write distinct, referenced blocks that
/// no one reads or relocates in this step, or the plan's ordering (which
/// only knows the moves' own reads) would be wrong.
llvm::Error checkMoves(const BlockPool &pool,
                       llvm::ArrayRef<RelocationOp> moves,
                       const GroupedWants &grouped,
                       const llvm::DenseSet<BlockId> &readInPlace) {
  const uint32_t numBlocks = pool.numBlocks();
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
    if (grouped.wantsOf.count(move.destination) ||
        readInPlace.count(move.destination))
      return inputError("block " + llvm::Twine(move.destination) +
                        " is overwritten by a move but read or relocated "
                        "in this step");
  }
  return llvm::Error::success();
}

/// Phase 2, duplication: one wanted position may turn the block in place
/// when no one reads it where it is; every other position gets a copy.
/// Sets each block's `inPlace`; returns the copies needed.
unsigned chooseInPlace(const BlockPool &pool,
                       llvm::MutableArrayRef<BlockWants> wants,
                       const llvm::DenseSet<BlockId> &readInPlace) {
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
  return numCopies;
}

/// Phase 3, hazards among the explicit moves: move A -> move B when B
/// overwrites what A reads. Copies write fresh blocks and in-place turns
/// write their own, so only explicit moves can close a cycle. Returns the
/// moves' strongly connected components (Tarjan): one of more than one move
/// is a cycle to break; leveling orders the rest.
llvm::SmallVector<llvm::SmallVector<uint32_t, 4>, 8>
moveComponents(llvm::ArrayRef<RelocationOp> moves) {
  llvm::DenseMap<BlockId, uint32_t> moveWriting;
  for (uint32_t index = 0; index < moves.size(); ++index)
    moveWriting[moves[index].destination] = index;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 8> moveGraph(moves.size());
  for (uint32_t index = 0; index < moves.size(); ++index) {
    auto writer = moveWriting.find(moves[index].source);
    if (writer != moveWriting.end())
      moveGraph[index].push_back(writer->second);
  }
  return stronglyConnectedComponents(moveGraph);
}

/// The temporaries breaking the cycles of `components` take: one per move
/// of a short cycle (two passes), one in all for a long one (serial).
unsigned
numTemporariesFor(llvm::ArrayRef<llvm::SmallVector<uint32_t, 4>> components,
                  const RelocationPlannerOptions &options) {
  unsigned numTemporaries = 0;
  for (const auto &component : components)
    if (component.size() > 1)
      numTemporaries += component.size() <= options.maxBatchedCycle
                            ? unsigned(component.size())
                            : 1;
  return numTemporaries;
}

/// New metadata of a block the plan writes, computed from the contents
/// before the plan.
struct Effect {
  BlockId block;
  int64_t storedPosition;
  unsigned numTokens;
};

/// The plan's ops before leveling, and the pool changes it will make once
/// it stands.
struct DraftPlan {
  llvm::SmallVector<RelocationOp, 16> ops;
  /// Extra read-after-write orderings (temporaries), as (before, after).
  llvm::SmallVector<std::pair<uint32_t, uint32_t>, 8> orderings;
  llvm::DenseSet<BlockId> temporaries;
  llvm::SmallVector<Effect, 16> effects;
  llvm::SmallVector<BlockId, 8> toFree, toTouch;
  /// The blocks allocated for the plan, handed out in order.
  llvm::ArrayRef<BlockId> fresh;
  size_t nextFresh = 0;

  BlockId takeFresh() { return fresh[nextFresh++]; }
};

/// The ops of the requests: an in-place turn or a copy per wanted position,
/// and the copies' rebindings.
void draftRelocations(const BlockPool &pool,
                      llvm::ArrayRef<RelocationRequest> requests,
                      llvm::ArrayRef<BlockWants> wants, DraftPlan &draft,
                      RelocationPlan &plan) {
  for (const BlockWants &blockWants : wants) {
    const BlockId block = blockWants.block;
    const int64_t current = pool.storedPosition(block);
    for (size_t slot = 0; slot < blockWants.positions.size(); ++slot) {
      const int64_t position = blockWants.positions[slot];
      if (position == current)
        continue; // already where it is wanted
      if (int(slot) == blockWants.inPlace) {
        draft.ops.push_back({block, block, position - current});
        draft.effects.push_back({block, position, pool.numTokens(block)});
        ++plan.numInPlace;
        continue;
      }
      BlockId copy = draft.takeFresh();
      draft.ops.push_back({block, copy, position - current});
      draft.effects.push_back({copy, position, pool.numTokens(block)});
      ++plan.numCopies;
      // The allocation's reference goes to the first requester; each
      // requester's reference on the original is dropped.
      const auto &requesters = blockWants.requesters[slot];
      for (size_t i = 0; i < requesters.size(); ++i) {
        const RelocationRequest &request = requests[requesters[i]];
        plan.rebindings.push_back({request.request, request.tag, block, copy});
        if (i > 0)
          draft.toTouch.push_back(copy);
        draft.toFree.push_back(block);
      }
    }
  }
}

/// A temporary the plan borrows: leveling must not order by its writes, and
/// the caller frees it after the batches ran.
BlockId borrowTemporary(DraftPlan &draft, RelocationPlan &plan) {
  BlockId temporary = draft.takeFresh();
  draft.temporaries.insert(temporary);
  plan.temporaries.push_back(temporary);
  return temporary;
}

/// The ops of the explicit moves, component by component, with each cycle
/// broken through temporaries.
void draftMoves(const BlockPool &pool, llvm::ArrayRef<RelocationOp> moves,
                llvm::ArrayRef<llvm::SmallVector<uint32_t, 4>> components,
                const RelocationPlannerOptions &options, DraftPlan &draft,
                RelocationPlan &plan) {
  for (const RelocationOp &move : moves)
    draft.effects.push_back({move.destination,
                             pool.storedPosition(move.source) + move.delta,
                             pool.numTokens(move.source)});
  for (const auto &component : components) {
    if (component.size() == 1) {
      draft.ops.push_back(moves[component.front()]);
      continue;
    }
    ++plan.numCycles;
    if (component.size() <= options.maxBatchedCycle) {
      // Save every source (turned) into its own temporary, then restore:
      // two passes for the whole cycle.
      for (uint32_t member : component) {
        const RelocationOp &move = moves[member];
        BlockId temporary = borrowTemporary(draft, plan);
        uint32_t save = uint32_t(draft.ops.size());
        draft.ops.push_back({move.source, temporary, move.delta});
        draft.orderings.push_back({save, uint32_t(draft.ops.size())});
        draft.ops.push_back({temporary, move.destination, 0});
      }
      continue;
    }
    // Serial path: park one source, run the rest of the cycle in its
    // dependency order, finish from the parked copy.
    ++plan.numSerialCycles;
    const RelocationOp &first = moves[component.front()];
    BlockId temporary = borrowTemporary(draft, plan);
    uint32_t save = uint32_t(draft.ops.size());
    draft.ops.push_back({first.source, temporary, 0});
    draft.orderings.push_back({save, uint32_t(draft.ops.size())});
    draft.ops.push_back({temporary, first.destination, first.delta});
    for (size_t i = 1; i < component.size(); ++i)
      draft.ops.push_back(moves[component[i]]);
  }
}

/// Phase 5, leveling: an op that overwrites a block runs after every op
/// that reads it (temporaries excepted: their reader follows their writer
/// through `orderings`). Fills `batches`; false when some op could not be
/// leveled (a cycle survived).
bool levelIntoBatches(
    const DraftPlan &draft,
    llvm::SmallVectorImpl<llvm::SmallVector<RelocationOp, 8>> &batches) {
  const llvm::ArrayRef<RelocationOp> ops = draft.ops;
  llvm::DenseMap<BlockId, uint32_t> writerOf;
  for (uint32_t index = 0; index < ops.size(); ++index)
    if (!draft.temporaries.count(ops[index].destination))
      writerOf[ops[index].destination] = index;
  llvm::SmallVector<llvm::SmallVector<uint32_t, 2>, 16> after(ops.size());
  std::vector<uint32_t> numBefore(ops.size(), 0);
  auto order = [&](uint32_t before, uint32_t later) {
    after[before].push_back(later);
    ++numBefore[later];
  };
  for (uint32_t index = 0; index < ops.size(); ++index) {
    if (draft.temporaries.count(ops[index].source))
      continue;
    auto writer = writerOf.find(ops[index].source);
    if (writer != writerOf.end() && writer->second != index)
      order(index, writer->second);
  }
  for (auto [before, later] : draft.orderings)
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
    if (batches.size() <= level[index])
      batches.resize(level[index] + 1);
    batches[level[index]].push_back(ops[index]);
    for (uint32_t later : after[index]) {
      level[later] = std::max(level[later], level[index] + 1);
      if (--numBefore[later] == 0)
        ready.push_back(later);
    }
  }
  return numLeveled == ops.size();
}

/// Phase 6, bookkeeping, once the plan stands: the pool's metadata says
/// what the blocks will hold after the batches ran.
void applyBookkeeping(BlockPool &pool, llvm::ArrayRef<RelocationOp> moves,
                      const DraftPlan &draft) {
  for (const RelocationOp &move : moves)
    pool.uncache(move.destination);
  for (const Effect &effect : draft.effects) {
    pool.setStoredPosition(effect.block, effect.storedPosition);
    pool.setNumTokens(effect.block, effect.numTokens);
  }
  pool.touch(draft.toTouch);
  pool.free(draft.toFree);
}

} // namespace

llvm::Expected<RelocationPlan>
planRelocations(BlockPool &pool, llvm::ArrayRef<RelocationRequest> requests,
                const llvm::DenseSet<BlockId> &readInPlace,
                llvm::ArrayRef<RelocationOp> moves,
                const RelocationPlannerOptions &options) {
  // 1. Validate and group by block; nothing in the pool changes until every
  //    check passed and the blocks were obtained.
  auto grouped = groupWants(pool, requests);
  if (!grouped)
    return grouped.takeError();
  if (llvm::Error error = checkMoves(pool, moves, *grouped, readInPlace))
    return error;
  // 2. Which wanted position turns each block in place; the rest are copies.
  unsigned numCopies = chooseInPlace(pool, grouped->wants, readInPlace);
  // 3. The moves in hazard order, cycles found and counted.
  auto components = moveComponents(moves);
  unsigned numTemporaries = numTemporariesFor(components, options);

  // 4. All the blocks at once, or nothing changes.
  auto fresh = pool.allocate(numCopies + numTemporaries);
  if (!fresh)
    return llvm::createStringError(
        std::errc::not_enough_memory,
        "relocation plan needs %u copies and %u temporaries: %s", numCopies,
        numTemporaries, llvm::toString(fresh.takeError()).c_str());
  RelocationPlan plan;
  DraftPlan draft;
  draft.fresh = *fresh;
  draftRelocations(pool, requests, grouped->wants, draft, plan);
  draftMoves(pool, moves, components, options, draft, plan);

  // 5. Level the ops into batches.
  if (!levelIntoBatches(draft, plan.batches)) {
    // Cannot happen after cycle breaking; keep the pool as it was.
    pool.free(*fresh);
    return llvm::createStringError(std::errc::state_not_recoverable,
                                   "relocation plan: a cycle survived");
  }

  // 6. Bookkeeping, now that the plan stands.
  applyBookkeeping(pool, moves, draft);
  return plan;
}

} // namespace spanc::kv
