// MappedFile: a whole file mapped read-only; release_pages gives back the resident pages of a
// range (the process's RSS falls) without changing what the mapping reads.
#include "util/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

namespace mnemo {
namespace {

// Resident pages of this process (/proc/self/statm, second field).
long resident_pages() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() / ("mnemo_mapped_file_" + std::to_string(::getpid()));
    contents_.resize(size_t{16} << 20);
    for (size_t i = 0; i < contents_.size(); ++i) contents_[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    std::ofstream out(path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(contents_.data()), static_cast<std::streamsize>(contents_.size()));
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::filesystem::path path_;
  std::vector<uint8_t> contents_;
};

uint64_t checksum(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); ++i) sum += bytes[i] * (i % 251 + 1);
  return sum;
}

TEST_F(MappedFileTest, ReleasedPagesLeaveTheProcessAndReadTheSame) {
  auto mapped = MappedFile::open(path_.string());
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  const std::span<const uint8_t> bytes = mapped->bytes();
  ASSERT_EQ(bytes.size(), contents_.size());
  const uint64_t want = checksum(contents_);
  ASSERT_EQ(checksum(bytes), want);  // every page now resident in this process

  const long before = resident_pages();
  const long page = ::sysconf(_SC_PAGESIZE);
  // A range that starts and ends inside pages: only the whole pages between go.
  mapped->release_pages(bytes.data() + 100, bytes.size() - 200);
  const long released = before - resident_pages();
  const long whole_pages = static_cast<long>(bytes.size()) / page - 2;
  EXPECT_GE(released, whole_pages * 9 / 10) << "resident pages before " << before;

  EXPECT_EQ(checksum(bytes), want);  // read back from the file
}

TEST_F(MappedFileTest, RangesOutsideTheMappingAreIgnored) {
  auto mapped = MappedFile::open(path_.string());
  ASSERT_TRUE(mapped.ok());
  const std::span<const uint8_t> bytes = mapped->bytes();
  const uint64_t want = checksum(bytes);
  const long before = resident_pages();
  std::vector<uint8_t> elsewhere(size_t{4} << 20, 7);
  mapped->release_pages(elsewhere.data(), elsewhere.size());            // not in the mapping
  mapped->release_pages(bytes.data() + bytes.size() - 4096, 1 << 20);  // runs past its end
  EXPECT_GE(resident_pages(), before);
  EXPECT_EQ(std::accumulate(elsewhere.begin(), elsewhere.end(), size_t{0}), elsewhere.size() * 7);
  EXPECT_EQ(checksum(bytes), want);
  MappedFile empty;
  empty.release_pages(bytes.data(), bytes.size());  // no mapping: nothing to do
  EXPECT_EQ(checksum(bytes), want);
}

}  // namespace
}  // namespace mnemo
