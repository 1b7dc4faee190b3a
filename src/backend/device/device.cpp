#include "backend/device/device.h"

#include <utility>

namespace tern {

Tensor Tensor::as_matrix(int64_t rows, int64_t cols) const {
  Tensor t = *this;
  t.ne = {cols, rows, 1, 1};
  return t;
}

Tensor Tensor::row_slice(int64_t begin, int64_t count) const {
  Tensor t = *this;
  t.data = static_cast<float*>(data) + begin * ne[0];
  t.ne = {ne[0], count, 1, 1};
  return t;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

void DeviceBuffer::release() {
  if (device_ != nullptr && data_ != nullptr) device_->free(data_, bytes_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tern
