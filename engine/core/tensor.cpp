// Tensor and Storage (see lockstep/tensor.h).
#include <lockstep/tensor.h>

#include <atomic>
#include <limits>

#include <lockstep/error.h>
#include "engine/core/copy_observer.h"
#include "engine/core/runtime.h"

namespace ls {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LS_CHECK(d >= 0, "shape ", shape_str(shape), " has a negative dimension");
    LS_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", shape_str(shape),
             " has more elements than fit in int64");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Storage::Storage(Device device, size_t bytes)
    : device_(device), bytes_(bytes), data_(device_runtime(device).allocator().allocate(bytes)) {}

Storage::~Storage() { device_runtime(device_).allocator().free(data_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::from_host(std::span<const float> values, const Shape& shape, Device device,
                         Stream& stream) {
  Tensor t = empty(shape, DType::kF32, device);
  LS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_host: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  t.copy_from_host_async(values.data(), values.size_bytes(), stream);
  stream.synchronize();
  return t;
}

Tensor Tensor::from_host_i32(std::span<const int32_t> values, const Shape& shape, Device device,
                             Stream& stream) {
  Tensor t = empty(shape, DType::kI32, device);
  LS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_host_i32: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  t.copy_from_host_async(values.data(), values.size_bytes(), stream);
  stream.synchronize();
  return t;
}

int64_t Tensor::dim(int i) const {
  const int64_t n = ndim();
  const int64_t index = i < 0 ? i + n : i;
  LS_CHECK(index >= 0 && index < n, "dim(", i, ") of ", describe(), " is out of range");
  return shape_[static_cast<size_t>(index)];
}

Device Tensor::device() const {
  LS_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

void* Tensor::data() const {
  LS_CHECK(defined(), "data() of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

float* Tensor::f32() const {
  LS_CHECK(dtype_ == DType::kF32, "expected an f32 tensor, got ", describe());
  return static_cast<float*>(data());
}

int32_t* Tensor::i32() const {
  LS_CHECK(dtype_ == DType::kI32, "expected an i32 tensor, got ", describe());
  return static_cast<int32_t*>(data());
}

uint16_t* Tensor::bf16() const {
  LS_CHECK(dtype_ == DType::kBF16, "expected a bf16 tensor, got ", describe());
  return static_cast<uint16_t*>(data());
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  LS_CHECK(defined(), "view of an undefined tensor");
  const int64_t count = shape_numel(shape);
  LS_CHECK(offset >= 0 && offset + count <= numel_, "view of ", count, " elements at offset ",
           offset, " does not fit in ", describe());
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = shape;
  t.numel_ = count;
  return t;
}

Tensor Tensor::view_as(DType dtype, int64_t offset, const Shape& shape) const {
  LS_CHECK(dtype_size(dtype) == dtype_size(dtype_), "view_as ", dtype_name(dtype), " of ",
           describe(), ": the element sizes differ; reinterpret only between types of one size");
  Tensor t = view(offset, shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::view_bytes(DType dtype, size_t byte_offset, const Shape& shape) const {
  LS_CHECK(defined(), "view_bytes of an undefined tensor");
  const size_t size = dtype_size(dtype);
  const size_t start = static_cast<size_t>(offset_) * dtype_size(dtype_) + byte_offset;
  const int64_t count = shape_numel(shape);
  LS_CHECK(start % size == 0, "view_bytes: ", dtype_name(dtype), " at byte ", byte_offset, " of ",
           describe(), " is not aligned to its ", size, "-byte elements");
  LS_CHECK(byte_offset + static_cast<size_t>(count) * size <= nbytes(), "view_bytes: ", count,
           " ", dtype_name(dtype), " elements at byte ", byte_offset, " do not fit in ",
           describe());
  Tensor t = *this;
  t.dtype_ = dtype;
  t.offset_ = static_cast<int64_t>(start / size);
  t.shape_ = shape;
  t.numel_ = count;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  LS_CHECK(shape_numel(shape) == numel_, "reshape of ", describe(), " to ", shape_str(shape),
           " changes the element count");
  return view(0, shape);
}

void Tensor::copy_from_host_async(const void* src, size_t bytes, Stream& stream) const {
  LS_CHECK(bytes == nbytes(), "copy_from_host: ", bytes, " bytes given for ", describe(), " (",
           nbytes(), " bytes)");
  device_runtime(stream.device()).copy_async(data(), src, bytes, stream);
}

void Tensor::copy_to_host_async(void* dst, size_t bytes, Stream& stream) const {
  LS_CHECK(bytes == nbytes(), "copy_to_host: ", bytes, " bytes of room for ", describe(), " (",
           nbytes(), " bytes)");
  device_runtime(stream.device()).copy_async(dst, data(), bytes, stream);
}

void Tensor::copy_from(const Tensor& src, Stream& stream) const {
  LS_CHECK(src.dtype_ == dtype_ && src.numel_ == numel_, "copy_from: ", src.describe(),
           " cannot be copied into ", describe(), "; dtypes and element counts must match");
  const bool reachable = device() == stream.device() || src.device() == stream.device();
  LS_CHECK(reachable, "copy_from: neither ", src.describe(), " nor ", describe(),
           " is on the stream's device ", stream.device().str());
  if (src.device() == device()) detail::note_device_copy(nbytes());
  device_runtime(stream.device()).copy_async(data(), src.data(), nbytes(), stream);
}

namespace detail {
namespace {
std::atomic<CopyObserver> g_copy_observer{nullptr};
}  // namespace
void set_copy_observer(CopyObserver observer) { g_copy_observer.store(observer); }
void note_device_copy(size_t bytes) {
  if (CopyObserver observer = g_copy_observer.load(std::memory_order_relaxed)) observer(bytes);
}
}  // namespace detail

std::vector<float> Tensor::to_host_f32(Stream& stream) const {
  std::vector<float> out(static_cast<size_t>(numel_));
  LS_CHECK(dtype_ == DType::kF32, "to_host_f32 of ", describe());
  copy_to_host_async(out.data(), nbytes(), stream);
  stream.synchronize();
  return out;
}

std::vector<int32_t> Tensor::to_host_i32(Stream& stream) const {
  std::vector<int32_t> out(static_cast<size_t>(numel_));
  LS_CHECK(dtype_ == DType::kI32, "to_host_i32 of ", describe());
  copy_to_host_async(out.data(), nbytes(), stream);
  stream.synchronize();
  return out;
}

}  // namespace ls
