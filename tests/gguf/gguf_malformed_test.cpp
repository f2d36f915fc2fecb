// Malformed GGUF files: each must give an Error naming the file and the problem, never a crash or
// an out-of-bounds read (run these under ASan: every parse reads from an exactly sized allocation).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_bytes.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/temp_file.h"

namespace mnemo::gguf {
namespace {

using ::testing::HasSubstr;
using testing::GgufBytes;
using testing::write_temp_file;

constexpr const char* kName = "bad.gguf";
constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// A copy on the heap with no slack, so that ASan catches a read one byte past the end.
class ExactCopy {
 public:
  explicit ExactCopy(std::span<const uint8_t> bytes) : size_(bytes.size()), data_(new uint8_t[bytes.size()]) {
    if (size_ > 0) std::memcpy(data_.get(), bytes.data(), size_);
  }
  std::span<const uint8_t> bytes() const { return {data_.get(), size_}; }

 private:
  size_t size_;
  std::unique_ptr<uint8_t[]> data_;
};

Result<File> parse_exact(std::span<const uint8_t> bytes) {
  const ExactCopy copy(bytes);
  return File::parse(copy.bytes(), kName);  // errors only: a File would point into the copy
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& problem) {
  const auto file = parse_exact(bytes);
  ASSERT_FALSE(file.ok()) << "expected: " << problem;
  EXPECT_THAT(file.error().message(), HasSubstr(kName));
  EXPECT_THAT(file.error().message(), HasSubstr(problem));
}

// One tensor "t" with the given shape, type and offset, followed by `data_bytes` of data.
std::vector<uint8_t> one_tensor(std::initializer_list<uint64_t> dims, uint32_t type_id, uint64_t offset = 0,
                                size_t data_bytes = 64) {
  return GgufBytes().header(1, 0).tensor_info("t", dims, type_id, offset).pad_to(32).zeros(data_bytes).bytes();
}

TEST(GgufMalformed, ValidBuilderFileParses) {
  // The builder itself makes good files: the cases below differ from this only in the broken part.
  const std::vector<uint8_t> bytes = one_tensor({4, 4}, kF32);
  const ExactCopy copy(bytes);
  auto file = File::parse(copy.bytes(), kName);
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(file->tensors().at(0).n_bytes, 64u);
}

TEST(GgufMalformed, BadMagic) {
  expect_refused(GgufBytes().u32(0x46554746).u32(3).u64(0).u64(0).bytes(), "not a GGUF file");
  expect_refused(GgufBytes().u32(0x47475546).u32(3).u64(0).u64(0).bytes(), "bad magic");
}

TEST(GgufMalformed, EmptyAndTinyInputs) {
  expect_refused({}, "truncated");
  expect_refused({'G', 'G'}, "truncated");
  expect_refused({'G', 'G', 'U', 'F'}, "truncated");
  expect_refused(GgufBytes().u32(testing::kMagic).u32(3).u64(0).bytes(), "truncated");
}

TEST(GgufMalformed, HugeCounts) {
  expect_refused(GgufBytes().header(uint64_t{1} << 62, 0).bytes(), "tensor count 4611686018427387904 exceeds");
  expect_refused(GgufBytes().header(~uint64_t{0}, 0).bytes(), "tensor count");
  expect_refused(GgufBytes().header(0, uint64_t{1} << 62).bytes(), "metadata count 4611686018427387904 exceeds");
  expect_refused(GgufBytes().header(0, ~uint64_t{0}).bytes(), "metadata count");
  // Plausible counts that the rest of the file does not back up.
  expect_refused(GgufBytes().header(0, 3).kv_u32("a", 1).bytes(), "metadata count 3 exceeds");
}

TEST(GgufMalformed, HugeStringLengths) {
  expect_refused(GgufBytes().header(0, 1).u64(~uint64_t{0}).zeros(16).bytes(), "metadata entry 0: string length");
  expect_refused(GgufBytes().header(0, 1).u64(uint64_t{1} << 40).zeros(16).bytes(), "string length 1099511627776 exceeds");
  expect_refused(GgufBytes().header(0, 1).str("key").type(ValueType::kString).u64(1000).zeros(10).bytes(),
                 "metadata 'key': string length 1000 exceeds");
  expect_refused(GgufBytes().header(1, 0).u64(uint64_t{1} << 63).zeros(64).bytes(), "tensor info 0: string length");
}

TEST(GgufMalformed, HugeArrayLengths) {
  expect_refused(GgufBytes().header(0, 1).str("arr").type(ValueType::kArray).type(ValueType::kUint64)
                     .u64(uint64_t{1} << 61).zeros(64).bytes(),
                 "metadata 'arr': array of 2305843009213693952 uint64 exceeds the file");
  expect_refused(GgufBytes().header(0, 1).str("arr").type(ValueType::kArray).type(ValueType::kUint8)
                     .u64(~uint64_t{0}).bytes(),
                 "array of");
  // Each string element needs at least its 8-byte length.
  expect_refused(GgufBytes().header(0, 1).str("arr").type(ValueType::kArray).type(ValueType::kString)
                     .u64(5).zeros(39).bytes(),
                 "array of 5 string exceeds");
  expect_refused(GgufBytes().header(0, 1).str("arr").type(ValueType::kArray).type(ValueType::kArray)
                     .u64(uint64_t{1} << 60).zeros(64).bytes(),
                 "array of");
}

TEST(GgufMalformed, UnknownValueTypes) {
  expect_refused(GgufBytes().header(0, 1).str("k").u32(13).u32(0).bytes(), "metadata 'k': unknown metadata value type 13");
  expect_refused(GgufBytes().header(0, 1).str("k").u32(0xFFFFFFFF).u64(0).bytes(), "unknown metadata value type 4294967295");
  expect_refused(GgufBytes().header(0, 1).str("k").type(ValueType::kArray).u32(99).u64(0).bytes(),
                 "metadata 'k': unknown metadata value type 99");
}

TEST(GgufMalformed, BoolMustBeZeroOrOne) {
  expect_refused(GgufBytes().header(0, 1).str("flag").type(ValueType::kBool).u8(2).bytes(),
                 "metadata 'flag': bool value 2 is neither 0 nor 1");
  expect_refused(GgufBytes().header(0, 1).str("flags").type(ValueType::kArray).type(ValueType::kBool).u64(2)
                     .u8(1).u8(255).bytes(),
                 "bool value 255");
}

GgufBytes nested_arrays(int depth) {
  GgufBytes b;
  b.header(0, 1).str("deep").type(ValueType::kArray);
  for (int level = 1; level < depth; ++level) b.type(ValueType::kArray).u64(1);
  b.type(ValueType::kUint8).u64(0);
  return b;
}

TEST(GgufMalformed, DeeplyNestedArrays) {
  const std::vector<uint8_t> eight = nested_arrays(8).bytes();
  const ExactCopy copy(eight);
  auto file = File::parse(copy.bytes(), kName);
  ASSERT_TRUE(file.ok()) << file.error().message();
  expect_refused(nested_arrays(9).bytes(), "metadata 'deep': arrays nested too deeply");
  expect_refused(nested_arrays(100000).bytes(), "arrays nested too deeply");
}

TEST(GgufMalformed, UnknownTensorTypes) {
  for (uint32_t type_id : {4u, 5u, 31u, 36u, 38u, 40u, 1000u, 0xFFFFFFFFu}) {
    expect_refused(one_tensor({32}, type_id), "tensor 't': unknown tensor type " + std::to_string(type_id));
  }
}

TEST(GgufMalformed, DimensionCounts) {
  expect_refused(one_tensor({}, kF32), "tensor 't': 0 dimensions");
  expect_refused(one_tensor({1, 1, 1, 1, 1}, kF32), "tensor 't': 5 dimensions");
  expect_refused(GgufBytes().header(1, 0).str("t").u32(0xFFFFFFFF).zeros(64).bytes(), "4294967295 dimensions");
}

TEST(GgufMalformed, BadDimensions) {
  expect_refused(one_tensor({0}, kF32), "tensor 't': dimension 0 is 0");
  expect_refused(one_tensor({4, 0}, kF32), "dimension 1 is 0");
  expect_refused(one_tensor({4, uint64_t{1} << 63}, kF32), "dimension 1 is 9223372036854775808");
  expect_refused(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32), "tensor 't': element count overflows");
  expect_refused(one_tensor({2, 2, uint64_t{1} << 31, uint64_t{1} << 31}, kF32), "element count overflows");
  expect_refused(one_tensor({uint64_t{1} << 62}, kF32), "tensor 't': byte size overflows");
  expect_refused(one_tensor({33}, kQ8_0), "tensor 't': row of 33 elements is not a whole number of Q8_0 blocks of 32");
}

TEST(GgufMalformed, TensorPlacement) {
  expect_refused(one_tensor({4}, kF32, 1), "tensor 't': offset 1 is not aligned to 32");
  expect_refused(one_tensor({4}, kF32, 16), "offset 16 is not aligned to 32");
  expect_refused(one_tensor({4}, kF32, 64, 64), "tensor 't': data [64, +16) lies outside the data section of 64 bytes");
  expect_refused(one_tensor({32}, kF32, 0, 127), "data [0, +128) lies outside");
  expect_refused(one_tensor({4}, kF32, uint64_t{1} << 63), "lies outside");
  expect_refused(one_tensor({4}, kF32, ~uint64_t{31}), "lies outside");
  // The tensor infos end, but the file stops before the aligned start of the data section.
  expect_refused(GgufBytes().header(1, 0).tensor_info("t", {4}, kF32, 0).bytes(), "truncated before the tensor data");
}

TEST(GgufMalformed, Duplicates) {
  expect_refused(GgufBytes().header(0, 2).kv_u32("k", 1).kv_string("k", "x").bytes(),
                 "metadata 'k': duplicate metadata key");
  expect_refused(GgufBytes()
                     .header(2, 0)
                     .tensor_info("w", {8}, kF32, 0)
                     .tensor_info("w", {8}, kF32, 32)
                     .pad_to(32)
                     .zeros(64)
                     .bytes(),
                 "tensor 'w': duplicate tensor name");
}

TEST(GgufMalformed, BadAlignmentValues) {
  for (uint32_t alignment : {0u, 3u, 24u, 1u << 21, 1u << 31, 0xFFFFFFFFu}) {
    Writer writer;
    writer.set_u32("general.alignment", alignment);
    expect_refused(writer.to_bytes(),
                   "metadata 'general.alignment': " + std::to_string(alignment) + " is not a power of two");
  }
  Writer negative;
  negative.set_i32("general.alignment", -32);
  expect_refused(negative.to_bytes(), "general.alignment': -32 is not a power of two");
  Writer text;
  text.set_string("general.alignment", "32");
  expect_refused(text.to_bytes(), "general.alignment': string is not a power of two");
  // Writers configured with a bad alignment record it; the reader refuses those files too.
  for (uint32_t alignment : {0u, 3u}) {
    Writer writer(alignment);
    const std::vector<uint8_t> data(16);
    ASSERT_TRUE(writer.add_tensor("t", DType::F32, {4}, data).ok());
    expect_refused(writer.to_bytes(), "general.alignment");
  }
}

// A valid file with metadata of every kind and three tensors, for the sweeps below.
std::vector<uint8_t> rich_file() {
  Writer writer(64);
  writer.set_string("general.architecture", "test");
  writer.set_u32("count", 3);
  writer.set_bool("flag", true);
  writer.set("f64", Value{0.5});
  writer.set_string_array("tokens", {"a", "", "ccc"});
  writer.set("nested", Value{Array{ValueType::kArray, {Value{Array{ValueType::kInt16, {Value{int16_t{-2}}}}}}}});
  const std::vector<uint8_t> f32(4 * 6, 7);
  const std::vector<uint8_t> q8(34 * 2, 9);
  const std::vector<uint8_t> i8(3, 5);
  EXPECT_TRUE(writer.add_tensor("a", DType::F32, {3, 2}, f32).ok());
  EXPECT_TRUE(writer.add_tensor("b", DType::Q8_0, {32, 2}, q8).ok());
  EXPECT_TRUE(writer.add_tensor("c", DType::I8, {3}, i8).ok());
  return writer.to_bytes();
}

TEST(GgufMalformed, EveryTruncationIsRefusedUntilTheDataIsComplete) {
  const std::vector<uint8_t> full = rich_file();
  auto parsed = File::parse(full, kName);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  size_t data_end = 0;
  for (const TensorInfo& t : parsed->tensors()) {
    data_end = std::max(data_end, static_cast<size_t>(t.data - full.data()) + t.n_bytes);
  }
  ASSERT_LT(data_end, full.size());  // the writer pads after the last tensor
  for (size_t length = 0; length <= full.size(); ++length) {
    SCOPED_TRACE(::testing::Message() << "truncated to " << length << " of " << full.size());
    const auto file = parse_exact(std::span(full).first(length));
    if (length < data_end) {
      ASSERT_FALSE(file.ok());
      EXPECT_THAT(file.error().message(), HasSubstr(kName));
    } else {
      ASSERT_TRUE(file.ok()) << file.error().message();  // only trailing padding was cut
    }
  }
}

TEST(GgufMalformed, EveryCorruptedByteParsesOrFailsCleanly) {
  const std::vector<uint8_t> full = rich_file();
  const size_t header_end = static_cast<size_t>(File::parse(full, kName)->tensors()[0].data - full.data());
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (uint8_t replacement : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7F}, uint8_t{0x80}, uint8_t{0xFF}}) {
      std::vector<uint8_t> corrupted = full;
      corrupted[pos] = replacement;
      const auto file = parse_exact(corrupted);
      if (!file.ok()) {
        EXPECT_THAT(file.error().message(), HasSubstr(kName)) << "byte " << pos;
      }
    }
  }
}

TEST(GgufOpen, MissingFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "mnemo_no_such_file.gguf";
  std::filesystem::remove(path);
  auto file = File::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message(), HasSubstr(path));
  EXPECT_THAT(file.error().message(), HasSubstr("No such file or directory"));
}

TEST(GgufOpen, DirectoryIsRefused) {
  auto file = File::open(::testing::TempDir());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message(), HasSubstr(::testing::TempDir()));
  EXPECT_THAT(file.error().message(), HasSubstr("not a regular file"));
}

TEST(GgufOpen, EmptyAndMalformedFilesOnDiskNameThePath) {
  const std::string empty = write_temp_file("empty.gguf", {});
  auto empty_file = File::open(empty);
  ASSERT_FALSE(empty_file.ok());
  EXPECT_THAT(empty_file.error().message(), HasSubstr(empty));
  EXPECT_THAT(empty_file.error().message(), HasSubstr("truncated"));

  const std::string bad = write_temp_file("bad.gguf", one_tensor({4}, kF32, 1));
  auto bad_file = File::open(bad);
  ASSERT_FALSE(bad_file.ok());
  EXPECT_THAT(bad_file.error().message(), HasSubstr(bad + ": tensor 't': offset 1 is not aligned"));
}

}  // namespace
}  // namespace mnemo::gguf
