// A read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/error.h"

namespace tern {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// A file written under a temporary name and renamed into place by commit(), so a crash or an
// error never leaves a partial file under the final name. Destroying it uncommitted removes it.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::string& path);

  AtomicFileWriter() = default;
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Result<void> write(std::span<const uint8_t> bytes);
  Result<void> write_zeros(size_t count);
  uint64_t bytes_written() const { return written_; }
  // fsync, close, rename to the final path.
  Result<void> commit();

 private:
  void abandon();
  int fd_ = -1;
  uint64_t written_ = 0;
  std::string path_;
  std::string tmp_path_;
};

Result<void> write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace tern
