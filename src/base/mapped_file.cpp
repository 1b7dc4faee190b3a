#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tern {

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return make_error("cannot stat {}: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("{} is not a regular file", path);
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return make_error("cannot mmap {}: {}", path, std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  release();
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path) {
  AtomicFileWriter writer;
  writer.path_ = path;
  writer.tmp_path_ = path + ".tmp-" + std::to_string(::getpid());
  writer.fd_ = ::open(writer.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (writer.fd_ < 0) {
    return make_error("cannot create {}: {}", writer.tmp_path_, std::strerror(errno));
  }
  return writer;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      written_(other.written_),
      path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() {
  abandon();
}

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fd_ = -1;
  }
}

Result<void> AtomicFileWriter::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return make_error("write to a closed file {}", path_);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot write {}: {}", tmp_path_, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  written_ += bytes.size();
  return {};
}

Result<void> AtomicFileWriter::write_zeros(size_t count) {
  static const uint8_t kZeros[4096] = {};
  while (count > 0) {
    size_t n = count < sizeof(kZeros) ? count : sizeof(kZeros);
    TERN_TRY(write({kZeros, n}));
    count -= n;
  }
  return {};
}

Result<void> AtomicFileWriter::commit() {
  if (fd_ < 0) return make_error("commit of a closed file {}", path_);
  int fd = std::exchange(fd_, -1);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return make_error("cannot flush {}: {}", tmp_path_, std::strerror(err));
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return make_error("cannot rename {} to {}: {}", tmp_path_, path_, std::strerror(err));
  }
  return {};
}

Result<void> write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  auto writer = AtomicFileWriter::create(path);
  if (!writer) return writer.error();
  TERN_TRY(writer->write(bytes));
  return writer->commit();
}

}  // namespace tern
