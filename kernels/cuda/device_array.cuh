// Device memory that frees itself, for accord's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/check.cuh"

namespace accord::cuda {

// Device memory for at least `count` values of T, freed with its owner.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(DeviceArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }

  // Grows to hold `count` values; what it held is lost when it grows.
  // Whether it grew (and so moved).
  bool ensure(std::size_t count) {
    if (count <= count_) return false;
    T* fresh = nullptr;
    ACCORD_CUDA_CHECK(cudaMalloc(&fresh, count * sizeof(T)));
    if (data_ != nullptr) cudaFree(data_);
    data_ = fresh;
    count_ = count;
    return true;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace accord::cuda
