//===- Launch.h - Grid and block sizes from problem sizes -----------------===//
//
// Host-only launch shapes, plain functions of the problem's size, tested
// without a GPU: every kernel asks here how many thread blocks of how many
// threads to run, so an empty problem launches nothing and a large one
// never exceeds the grid's limits.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_LAUNCH_H
#define SPANC_RUNTIME_KERNELS_CUDA_LAUNCH_H

#include <algorithm>
#include <cstdint>

namespace spanc::cuda {

struct LaunchShape {
  int64_t blocks = 0; ///< 0: nothing to launch
  int threads = 0;
};

/// The most thread blocks of a grid-stride elementwise launch: enough to
/// fill an H200 (132 SMs x 16 blocks) many times over, far below the grid
/// limit, so a huge tensor loops inside each thread instead.
constexpr int64_t kMaxElementwiseBlocks = int64_t(1) << 16;

/// `count` independent elements, one thread each, grid-stride beyond
/// kMaxElementwiseBlocks blocks of 256 threads.
inline LaunchShape elementwiseLaunch(int64_t count) {
  if (count <= 0)
    return {};
  constexpr int threads = 256;
  return {std::min(kMaxElementwiseBlocks, (count + threads - 1) / threads),
          threads};
}

/// One thread block per row, its threads striding over `cols`: a warp
/// multiple, at most 1024, no more than the row has columns (rounded up
/// to a warp).
inline LaunchShape rowLaunch(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0)
    return {};
  const int64_t warps = std::min<int64_t>(32, (cols + 31) / 32);
  return {rows, int(warps * 32)};
}

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_LAUNCH_H
