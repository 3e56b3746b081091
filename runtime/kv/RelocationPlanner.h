//===- RelocationPlanner.h - CIDRA: safe ReRoPE relocation per step -------===//
//
// A cached span block stores K rotated at one position. When requests of one
// scheduler step want blocks at other positions, rotating in place is only
// safe for a block nobody else reads at its current position and nobody else
// wants elsewhere. CIDRA (after the span-queries paper) plans a step:
//  1. group the wanted positions per block; keep one in place when no one
//     reads the block where it is, duplicate the block (fresh pool block,
//     copy + rotate in one pass) for every other position;
//  2. order all moves by their write-after-read hazards (a move that
//     overwrites a block runs after every move that reads it), find cycles
//     with Tarjan's SCC (iterative), break a small cycle with one temporary
//     per member (two passes) and a large one with a single temporary (a
//     serial chain);
//  3. level the acyclic result into batches, each one kernel pass.
// The plan is plain data; relocateBlocks applies it batch by batch. Pool
// bookkeeping (copies' references, stored positions) is done when the plan
// is made, all or nothing: a plan that cannot get its blocks changes nothing.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KV_RELOCATIONPLANNER_H
#define SPANC_RUNTIME_KV_RELOCATIONPLANNER_H

#include "runtime/kv/BlockPool.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace spanc::kv {

using RequestId = uint64_t;

/// One relocation: destination's K = source's K turned by `delta`
/// positions; when destination != source, V is copied too (a duplicate).
/// A backend runs it (on the CPU cpu::relocateBlocks, runtime/kernels/cpu/
/// Rerope.h); a delta of 0 is a copy-on-write copy.
struct RelocationOp {
  uint32_t source = 0;
  uint32_t destination = 0;
  int64_t delta = 0;
};

/// Request `request` reuses `block` (holding one reference to it) and needs
/// its first token at `wantedPosition`. `tag` is the caller's name for this
/// use (e.g. the logical block index), echoed in the rebinding.
struct RelocationRequest {
  RequestId request = 0;
  uint32_t tag = 0;
  BlockId block = InvalidBlock;
  int64_t wantedPosition = 0;
};

/// The use `tag` of `request` now reads `block` instead of `requested`; its
/// reference moved from `requested` to `block`.
struct Rebinding {
  RequestId request = 0;
  uint32_t tag = 0;
  BlockId requested = InvalidBlock;
  BlockId block = InvalidBlock;
};

struct RelocationPlan {
  /// Kernel passes, applied in order; the ops of one batch are independent.
  llvm::SmallVector<llvm::SmallVector<RelocationOp, 8>, 4> batches;
  llvm::SmallVector<Rebinding, 8> rebindings;
  /// Pool blocks the plan borrowed to break cycles: free them (and only
  /// them) once the batches ran.
  llvm::SmallVector<BlockId, 4> temporaries;
  unsigned numInPlace = 0;      ///< blocks rotated where they are
  unsigned numCopies = 0;       ///< duplicates made (copy + rotate)
  unsigned numCycles = 0;       ///< cycles among moves
  unsigned numSerialCycles = 0; ///< of which broken with one temporary

  bool empty() const { return batches.empty(); }
  size_t numOps() const;
};

struct RelocationPlannerOptions {
  /// Cycles of at most this many moves get one temporary per move (two
  /// passes); longer ones one temporary in all (as many passes as moves).
  unsigned maxBatchedCycle = 8;
};

/// Plans one step. `requests`: the relocations the step's requests need
/// (wanted position != the block's stored position). `readInPlace`: blocks
/// read at their current stored position during this step (by running
/// requests, or by new ones that want them there). `moves`: optional extra
/// block-to-block moves (destination := source turned by delta, all reading
/// the contents before the plan), e.g. from compaction; their destinations
/// must be referenced, distinct, and not requested. Fails, changing nothing,
/// on inconsistent input or when the pool cannot supply the blocks.
llvm::Expected<RelocationPlan>
planRelocations(BlockPool &pool, llvm::ArrayRef<RelocationRequest> requests,
                const llvm::DenseSet<BlockId> &readInPlace,
                llvm::ArrayRef<RelocationOp> moves = {},
                const RelocationPlannerOptions &options = {});

/// Strongly connected components of a directed graph on nodes 0..n-1 given
/// as adjacency lists, in reverse topological order (Tarjan, iterative: no
/// recursion, so any depth is safe). Exposed for tests.
llvm::SmallVector<llvm::SmallVector<uint32_t, 4>, 8>
stronglyConnectedComponents(
    llvm::ArrayRef<llvm::SmallVector<uint32_t, 2>> successors);

} // namespace spanc::kv

#endif // SPANC_RUNTIME_KV_RELOCATIONPLANNER_H
