//===- Backend.h - A device that runs forward steps over paged K/V --------===//
//
// The seam between the scheduler and a device (docs/ARCHITECTURE.md,
// "Running a plan"). A backend owns the K/V memory of the paged cache and
// runs what a step needs there: the block copies and CIDRA relocations the
// cache manager planned, then one forward pass over a batch of page-listed
// sequences. The scheduler and the model runner see only this interface, so
// another device (CUDA) implements it without touching them.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_BACKEND_BACKEND_H
#define SPANC_RUNTIME_BACKEND_BACKEND_H

#include "runtime/backend/ForwardProfile.h"
#include "runtime/backend/StepLayout.h"
#include "runtime/kv/RelocationPlanner.h"
#include "runtime/model/Forward.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace spanc::backend {

class KvStorage;

class Backend {
public:
  virtual ~Backend();

  /// Runs one step: decode sequences (model::RowKind::Decode) come first.
  /// Each sequence's new tokens are the last ones of its page list; their
  /// K/V are written into those slots. Fails, naming the sequence, before
  /// touching the cache when a sequence is malformed. The step is checked
  /// and laid out here, once (StepLayout); the backend runs the layout.
  llvm::Error forward(llvm::ArrayRef<model::ForwardSequence> batch,
                      model::ForwardOutput &output);

  /// Runs only layers [0, numLayers) of a step, writing their K/V; no
  /// sequence may ask for logits (a blend's selection pass).
  llvm::Error forwardLayers(llvm::ArrayRef<model::ForwardSequence> batch,
                            uint32_t numLayers);

  /// Per token of the first validTokens[i] slots of blocks a[i] and b[i]:
  /// the squared distance of their K and V rows at `layer`, appended to
  /// `distances` in block order.
  virtual void tokenDistances(uint32_t layer, llvm::ArrayRef<int32_t> a,
                              llvm::ArrayRef<int32_t> b,
                              llvm::ArrayRef<int32_t> validTokens,
                              std::vector<float> &distances) = 0;
  /// Runs a CIDRA plan's batches in order (duplicates, ReRoPE moves).
  virtual void relocate(const kv::RelocationPlan &plan) = 0;

  /// Copies a block before its first write (a shared or cached block a
  /// decode slot opens: kv::DecodeSlot::copy).
  virtual void copyBlock(const kv::RelocationOp &copy) = 0;

  /// Waits for the work a device queued (relocate and copyBlock may
  /// return before it ran) and reports a failure it kept; the CPU's work
  /// is done when its calls return.
  virtual llvm::Error synchronize() { return llvm::Error::success(); }

  /// The K/V memory when it lives in host memory as a KvStorage (tests
  /// compare what relocation left there); nullptr on a device.
  virtual const KvStorage *hostStorage() const { return nullptr; }

  /// Times the forward passes from now on (each step's layout, and each op
  /// where the backend times its ops: the CPU's), or stops timing them.
  void setProfiling(bool enabled);
  /// What the passes timed since the last resetProfile took.
  ForwardProfile profile() const;
  void resetProfile();

protected:
  /// The backend's own op timers; none by default.
  virtual void enableOpTimers(bool) {}
  virtual ForwardProfile opProfile() const { return {}; }
  virtual void resetOpProfile() {}

  /// What this backend checks a step against (its storage's size, its RoPE
  /// table, what it refuses).
  virtual StepLimits stepLimits() const = 0;
  /// The model's layer count.
  virtual uint32_t numLayers() const = 0;
  /// Runs layers [0, numLayers) of a checked step; with `output` (and every
  /// layer run) the logits rows the step asks for.
  virtual llvm::Error runStep(const StepLayout &step,
                              model::ForwardOutput *output,
                              uint32_t numLayers) = 0;

private:
  /// Checks and lays `batch` out into `step` (timed when profiling).
  llvm::Error layOut(llvm::ArrayRef<model::ForwardSequence> batch,
                     uint32_t layers);

  StepLayout step; ///< reused from step to step (its arrays' capacity)
  bool profiling = false;
  /// The layouts' time and the passes' counts (the ops are opProfile()'s).
  ForwardProfile stepProfile;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_BACKEND_H
