//===- Device.cu - Devices, streams and device memory ---------------------===//

#include "runtime/kernels/cuda/Device.h"

#include "runtime/kernels/cuda/CudaCheck.cuh"

#include <utility>

namespace spanc::cuda {

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess)
    return 0;
  return count;
}

Status probeDevices() {
  int count = 0;
  SPANC_CUDA_CALL(cudaGetDeviceCount(&count));
  if (count == 0)
    return Status::failure("cudaGetDeviceCount: no CUDA device");
  return Status::success();
}

Status getDeviceProperties(int device, DeviceProperties &properties) {
  cudaDeviceProp raw;
  SPANC_CUDA_CALL(cudaGetDeviceProperties(&raw, device));
  properties.name = raw.name;
  properties.computeMajor = raw.major;
  properties.computeMinor = raw.minor;
  properties.multiprocessors = raw.multiProcessorCount;
  properties.totalMemory = raw.totalGlobalMem;
  properties.sharedMemoryPerBlockOptIn = raw.sharedMemPerBlockOptin;
  SPANC_CUDA_CALL(cudaDriverGetVersion(&properties.driverVersion));
  SPANC_CUDA_CALL(cudaRuntimeGetVersion(&properties.runtimeVersion));
  return Status::success();
}

Status setDevice(int device) {
  SPANC_CUDA_CALL(cudaSetDevice(device));
  return Status::success();
}

Status memoryInfo(size_t &freeBytes, size_t &totalBytes) {
  SPANC_CUDA_CALL(cudaMemGetInfo(&freeBytes, &totalBytes));
  return Status::success();
}

Status createStream(Stream &stream) {
  SPANC_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Status::success();
}

Status destroyStream(Stream stream) {
  SPANC_CUDA_CALL(cudaStreamDestroy(stream));
  return Status::success();
}

Status synchronize(Stream stream) {
  SPANC_CUDA_CALL(cudaStreamSynchronize(stream));
  return Status::success();
}

StreamTimeline::~StreamTimeline() {
  for (CUevent_st *event : events_)
    cudaEventDestroy(event);
}

Status StreamTimeline::mark(Stream stream) {
  if (used_ == events_.size()) {
    cudaEvent_t event = nullptr;
    SPANC_CUDA_CALL(cudaEventCreate(&event));
    events_.push_back(event);
  }
  SPANC_CUDA_CALL(cudaEventRecord(events_[used_], stream));
  ++used_;
  return Status::success();
}

Status StreamTimeline::collect(std::vector<float> &milliseconds) {
  milliseconds.clear();
  const size_t used = used_;
  used_ = 0;
  if (used == 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaEventSynchronize(events_[used - 1]));
  for (size_t index = 1; index < used; ++index) {
    float elapsed = 0;
    SPANC_CUDA_CALL(
        cudaEventElapsedTime(&elapsed, events_[index - 1], events_[index]));
    milliseconds.push_back(elapsed);
  }
  return Status::success();
}

Status allocate(void **pointer, size_t bytes) {
  *pointer = nullptr;
  if (bytes == 0)
    return Status::success();
  const cudaError_t error = cudaMalloc(pointer, bytes);
  if (error != cudaSuccess) {
    *pointer = nullptr;
    return cudaStatus(
        error, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
  }
  return Status::success();
}

Status release(void *pointer) {
  if (pointer)
    SPANC_CUDA_CALL(cudaFree(pointer));
  return Status::success();
}

Status copyToDevice(void *destination, const void *source, size_t bytes,
                    Stream stream) {
  if (bytes == 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaMemcpyAsync(destination, source, bytes,
                                  cudaMemcpyHostToDevice, stream));
  return Status::success();
}

Status copyToHost(void *destination, const void *source, size_t bytes,
                  Stream stream) {
  if (bytes == 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaMemcpyAsync(destination, source, bytes,
                                  cudaMemcpyDeviceToHost, stream));
  SPANC_CUDA_CALL(cudaStreamSynchronize(stream));
  return Status::success();
}

Status copyOnDevice(void *destination, const void *source, size_t bytes,
                    Stream stream) {
  if (bytes == 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaMemcpyAsync(destination, source, bytes,
                                  cudaMemcpyDeviceToDevice, stream));
  return Status::success();
}

Status fillZero(void *destination, size_t bytes, Stream stream) {
  if (bytes == 0)
    return Status::success();
  SPANC_CUDA_CALL(cudaMemsetAsync(destination, 0, bytes, stream));
  return Status::success();
}

DeviceBuffer::~DeviceBuffer() {
  // A failure to free at teardown has nobody to report to.
  if (data_)
    cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (data_)
      cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Status DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= size_)
    return Status::success();
  // cudaFree waits for the device, so no queued kernel still reads the
  // old allocation.
  SPANC_CUDA_TRY(release(data_));
  data_ = nullptr;
  size_ = 0;
  SPANC_CUDA_TRY(allocate(&data_, bytes));
  size_ = bytes;
  return Status::success();
}

} // namespace spanc::cuda
