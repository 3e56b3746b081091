//===- OpTimer.h - A forward pass op's wall time, when profiling ----------===//
#ifndef SPANC_RUNTIME_BACKEND_CPU_OPTIMER_H
#define SPANC_RUNTIME_BACKEND_CPU_OPTIMER_H

#include <chrono>

namespace spanc::backend {

/// Adds the elapsed time since construction to a profile counter (nothing
/// when disabled: no clock read).
class OpTimer {
public:
  OpTimer(bool enabled, double &counter)
      : counter(enabled ? &counter : nullptr),
        start(enabled ? std::chrono::steady_clock::now()
                      : std::chrono::steady_clock::time_point()) {}
  ~OpTimer() {
    if (counter)
      *counter += std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  }
  OpTimer(const OpTimer &) = delete;
  OpTimer &operator=(const OpTimer &) = delete;

private:
  double *counter;
  std::chrono::steady_clock::time_point start;
};

} // namespace spanc::backend

#endif // SPANC_RUNTIME_BACKEND_CPU_OPTIMER_H
