// A read-only memory mapping of a whole file (RAII, move-only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "util/result.h"

namespace mnemo {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Drops this process's resident pages wholly inside [begin, begin + n) (a range of bytes()):
  // for data copied elsewhere and rarely read again. Still readable: a page comes back from the
  // file when next touched. Anything outside the mapping is ignored.
  void release_pages(const void* begin, size_t n) const;
  const std::string& path() const { return path_; }

 private:
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace mnemo
