// Tensor: a typed, shaped, contiguous view of device memory that came from the device's caching
// allocator. Copies of a Tensor share storage (like PyTorch); view() makes a tensor over part of
// the same storage, which is how parameters and gradients live in one flat buffer each.
//
// Copies are asynchronous in stream order unless their name says they synchronize. Memory is
// returned to the allocator when the last Tensor over it goes away, so a tensor used by enqueued
// work must be kept alive until that work has run, or be freed on the same stream's order
// (see lockstep/allocator.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include <lockstep/stream.h>

namespace ls {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[128, 784]"

class Storage {
 public:
  Storage(Device device, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  size_t bytes_;
  void* data_;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised memory from the device's caching allocator.
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  // Allocates and copies host data in; synchronizes `stream` (for set-up and tests).
  static Tensor from_host(std::span<const float> values, const Shape& shape, Device device,
                          Stream& stream);
  static Tensor from_host_i32(std::span<const int32_t> values, const Shape& shape, Device device,
                              Stream& stream);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  std::string describe() const;  // "f32[128, 784] on host:0"

  void* data() const;
  float* f32() const;     // checks dtype
  int32_t* i32() const;   // checks dtype
  uint16_t* bf16() const; // checks dtype

  // A tensor over `numel(shape)` elements of this one's storage starting `offset` elements in.
  Tensor view(int64_t offset, const Shape& shape) const;
  // view() whose elements are read as `dtype`, of the same size (an i32 word as an f32: the
  // fields of a device-side struct such as the engine's step control).
  Tensor view_as(DType dtype, int64_t offset, const Shape& shape) const;
  // A tensor of `dtype` over this one's bytes from `byte_offset` on (the start a multiple of
  // dtype's size): a byte buffer holding tensors of several dtypes (a batch's named inputs).
  Tensor view_bytes(DType dtype, size_t byte_offset, const Shape& shape) const;
  // Same storage and element count, another shape.
  Tensor reshape(const Shape& shape) const;

  // Asynchronous copies in `stream` order; host buffers must outlive the copy.
  void copy_from_host_async(const void* src, size_t bytes, Stream& stream) const;
  void copy_to_host_async(void* dst, size_t bytes, Stream& stream) const;
  // Same dtype and element count; `src` may live on another device (staged through the host).
  void copy_from(const Tensor& src, Stream& stream) const;
  // Synchronizing read-back (for reporting and tests, not for the step).
  std::vector<float> to_host_f32(Stream& stream) const;
  std::vector<int32_t> to_host_i32(Stream& stream) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // elements
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace ls
