//===- AlignedAllocator.h - std::vector storage on cache-line boundaries --===//
//
// Kernels that stream packed weights load whole 64-byte vectors; a buffer
// from plain malloc starts 16 bytes into a line, so every such load would
// straddle two cache lines.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CPU_ALIGNEDALLOCATOR_H
#define SPANC_RUNTIME_KERNELS_CPU_ALIGNEDALLOCATOR_H

#include <cstddef>
#include <new>

namespace spanc::cpu {

template <typename T, std::size_t Alignment = 64> struct AlignedAllocator {
  using value_type = T;
  template <typename U> struct rebind {
    using other = AlignedAllocator<U, Alignment>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Alignment> &) noexcept {}
  T *allocate(std::size_t count) {
    return static_cast<T *>(
        ::operator new(count * sizeof(T), std::align_val_t(Alignment)));
  }
  void deallocate(T *pointer, std::size_t) noexcept {
    ::operator delete(pointer, std::align_val_t(Alignment));
  }
  template <typename U>
  bool operator==(const AlignedAllocator<U, Alignment> &) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U, Alignment> &) const noexcept {
    return false;
  }
};

} // namespace spanc::cpu

#endif // SPANC_RUNTIME_KERNELS_CPU_ALIGNEDALLOCATOR_H
