//===- Device.h - Devices, streams and device memory ----------------------===//
//
// The thin layer over the CUDA runtime that the backend and the kernels'
// tests need: how many devices there are and what they can do, streams,
// and device memory with copies. Plain C++ declarations: the stream is the
// runtime's own handle type (cudaStream_t is `CUstream_st *`), declared
// here so that callers compiled by the host compiler need no CUDA header.
// Every call returns a Status naming the CUDA call that failed.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_RUNTIME_KERNELS_CUDA_DEVICE_H
#define SPANC_RUNTIME_KERNELS_CUDA_DEVICE_H

#include "runtime/kernels/cuda/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace spanc::cuda {

/// A CUDA stream (the same type as cudaStream_t); nullptr is the legacy
/// default stream.
using Stream = CUstream_st *;

/// Number of usable CUDA devices; 0 when there is no driver or no device.
int deviceCount();

/// Why deviceCount() is 0 ("cudaGetDeviceCount: cudaErrorNoDevice: ..."),
/// or a success when there is a device.
Status probeDevices();

struct DeviceProperties {
  std::string name;
  int computeMajor = 0; ///< compute capability, e.g. 9 for sm_90
  int computeMinor = 0;
  int multiprocessors = 0;
  size_t totalMemory = 0;               ///< bytes of global memory
  size_t sharedMemoryPerBlockOptIn = 0; ///< the most a kernel may ask for
  int driverVersion = 0;                ///< e.g. 13000 for CUDA 13.0
  int runtimeVersion = 0;
};

Status getDeviceProperties(int device, DeviceProperties &properties);
/// Makes `device` current for the calling thread.
Status setDevice(int device);
/// Bytes free and in total on the current device.
Status memoryInfo(size_t &freeBytes, size_t &totalBytes);

Status createStream(Stream &stream);
Status destroyStream(Stream stream);
/// Waits for everything queued on `stream`, and reports the first
/// asynchronous error a kernel on it raised.
Status synchronize(Stream stream);

/// Marks on a stream and the device time between consecutive marks (CUDA
/// events, made as needed and reused): a backend's op timers.
class StreamTimeline {
public:
  StreamTimeline() = default;
  StreamTimeline(const StreamTimeline &) = delete;
  StreamTimeline &operator=(const StreamTimeline &) = delete;
  ~StreamTimeline();

  /// Marks the point after everything queued on `stream` so far.
  Status mark(Stream stream);
  /// Waits for the last mark, sets `milliseconds[i]` to the time between
  /// marks i and i + 1, and forgets the marks.
  Status collect(std::vector<float> &milliseconds);
  /// Forgets the marks without reading them (a step that failed midway).
  void discard() { used_ = 0; }

private:
  std::vector<CUevent_st *> events_;
  size_t used_ = 0;
};

/// Device memory (cudaMalloc); `bytes` 0 gives nullptr.
Status allocate(void **pointer, size_t bytes);
/// Frees what allocate() gave (nullptr is a no-op).
Status release(void *pointer);

/// Host -> device, queued on `stream` (from pageable memory the call
/// returns once the source has been read).
Status copyToDevice(void *destination, const void *source, size_t bytes,
                    Stream stream);
/// Device -> host; waits for `stream`, so the data is there on return.
Status copyToHost(void *destination, const void *source, size_t bytes,
                  Stream stream);
/// Device -> device, queued on `stream`.
Status copyOnDevice(void *destination, const void *source, size_t bytes,
                    Stream stream);
/// Sets `bytes` bytes to zero, queued on `stream`.
Status fillZero(void *destination, size_t bytes, Stream stream);

/// Owns one device allocation; grows on demand and never shrinks, so
/// steady-state steps allocate nothing.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;

  /// Makes the buffer at least `bytes` long (contents are lost when it
  /// grows: only call between uses).
  Status reserve(size_t bytes);
  void *data() const { return data_; }
  template <typename T> T *as() const { return static_cast<T *>(data_); }
  size_t size() const { return size_; }

private:
  void *data_ = nullptr;
  size_t size_ = 0;
};

} // namespace spanc::cuda

#endif // SPANC_RUNTIME_KERNELS_CUDA_DEVICE_H
