//===- Stack.cpp - Run a recursive walk on a stack sized for it -----------===//

#include "ir/Stack.h"

#include "llvm/Support/ErrorHandling.h"

#include <pthread.h>

namespace spanc::ir {

namespace {

void *runWalk(void *walk) {
  (*static_cast<llvm::function_ref<void()> *>(walk))();
  return nullptr;
}

} // namespace

void runOnWalkStack(llvm::function_ref<void()> walk) {
  pthread_attr_t attributes;
  pthread_t worker;
  bool started = pthread_attr_init(&attributes) == 0 &&
                 pthread_attr_setstacksize(&attributes, kWalkStackBytes) == 0 &&
                 pthread_create(&worker, &attributes, runWalk, &walk) == 0;
  pthread_attr_destroy(&attributes);
  if (!started) {
    // No thread to be had (a process at its limit): the caller's stack is
    // all there is.
    walk();
    return;
  }
  if (pthread_join(worker, nullptr) != 0)
    llvm::report_fatal_error("cannot join the walk's thread");
}

} // namespace spanc::ir
