// Writer -> reader round trips: every metadata type, alignment, tensors, typed getters, versions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/temp_file.h"

namespace mnemo::gguf {
namespace {

using ::testing::HasSubstr;
using testing::temp_path;
using testing::write_temp_file;

// Bitwise for floats, so NaN payloads and -0.0 must survive too.
bool same_value(const Value& a, const Value& b) {
  if (a.v.index() != b.v.index()) return false;
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, Array>) {
          if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
          for (size_t i = 0; i < x.items.size(); ++i) {
            if (!same_value(x.items[i], y.items[i])) return false;
          }
          return true;
        } else if constexpr (std::is_floating_point_v<T>) {
          return std::memcmp(&x, &y, sizeof(T)) == 0;
        } else {
          return x == y;
        }
      },
      a.v);
}

Value array(ValueType elem_type, std::vector<Value> items) { return Value{Array{elem_type, std::move(items)}}; }

std::vector<std::pair<std::string, Value>> every_value_type() {
  return {
      {"u8", Value{uint8_t{250}}},
      {"i8", Value{int8_t{-7}}},
      {"u16", Value{uint16_t{65535}}},
      {"i16", Value{int16_t{-32768}}},
      {"u32", Value{uint32_t{4000000000u}}},
      {"i32", Value{int32_t{-123456789}}},
      {"f32", Value{1.5f}},
      {"f32.nan", Value{std::numeric_limits<float>::quiet_NaN()}},
      {"f32.negzero", Value{-0.0f}},
      {"bool.true", Value{true}},
      {"bool.false", Value{false}},
      {"string", Value{std::string("héllo wörld")}},
      {"string.empty", Value{std::string()}},
      {"string.nul", Value{std::string("a\0b", 3)}},
      {"u64", Value{uint64_t{18446744073709551615ull}}},
      {"i64", Value{int64_t{-9223372036854775807ll - 1}}},
      {"f64", Value{-2.25e300}},
      {"array.u8", array(ValueType::kUint8, {Value{uint8_t{1}}, Value{uint8_t{2}}})},
      {"array.i16", array(ValueType::kInt16, {Value{int16_t{-1}}})},
      {"array.f32", array(ValueType::kFloat32, {Value{0.5f}, Value{-3.0f}})},
      {"array.f64", array(ValueType::kFloat64, {Value{1e-300}})},
      {"array.bool", array(ValueType::kBool, {Value{true}, Value{false}, Value{true}})},
      {"array.u64", array(ValueType::kUint64, {Value{uint64_t{1} << 63}})},
      {"array.string", array(ValueType::kString, {Value{std::string("a")}, Value{std::string()}})},
      {"array.empty", array(ValueType::kInt32, {})},
      {"array.empty_strings", array(ValueType::kString, {})},
      {"array.nested",
       array(ValueType::kArray,
             {array(ValueType::kInt32, {Value{int32_t{1}}, Value{int32_t{2}}}), array(ValueType::kInt32, {}),
              array(ValueType::kArray, {array(ValueType::kString, {Value{std::string("deep")}})})})},
  };
}

TEST(GgufRoundTrip, EveryMetadataTypeSurvivesInOrder) {
  Writer writer;
  const auto entries = every_value_type();
  for (const auto& [key, value] : entries) writer.set(key, value);
  const std::vector<uint8_t> bytes = writer.to_bytes();
  auto file = File::parse(bytes, "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), kDefaultAlignment);
  ASSERT_EQ(file->metadata().size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(file->metadata()[i].first, entries[i].first);
    EXPECT_TRUE(same_value(file->metadata()[i].second, entries[i].second)) << entries[i].first;
    ASSERT_NE(file->find(entries[i].first), nullptr);
  }
  EXPECT_TRUE(file->tensors().empty());
}

TEST(GgufRoundTrip, SettingAKeyTwiceKeepsTheLastValue) {
  Writer writer;
  writer.set_u32("k", 1);
  writer.set_u32("k", 2);
  const std::vector<uint8_t> bytes = writer.to_bytes();
  auto file = File::parse(bytes, "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message();
  ASSERT_EQ(file->metadata().size(), 1u);
  EXPECT_EQ(*file->get_int("k"), 2);
}

TEST(GgufRoundTrip, EmptyFileHasNoMetadataOrTensors) {
  const std::vector<uint8_t> bytes = Writer().to_bytes();
  auto file = File::parse(bytes, "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_TRUE(file->metadata().empty());
  EXPECT_TRUE(file->tensors().empty());
}

struct TestTensor {
  std::string name;
  DType type;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 31 + salt);
  return data;
}

std::vector<TestTensor> several_tensors() {
  return {
      {"f32.matrix", DType::F32, {4, 3}, pattern(4 * 3 * 4, 1)},
      {"f16.vector", DType::F16, {7}, pattern(7 * 2, 2)},  // 14 bytes: the next tensor needs padding
      {"q8_0", DType::Q8_0, {64, 2}, pattern(4 * 34, 3)},
      {"q4_k", DType::Q4_K, {256}, pattern(144, 4)},
      {"q5_0", DType::Q5_0, {32, 3}, pattern(3 * 22, 5)},
      {"i8.odd", DType::I8, {5}, pattern(5, 6)},
      {"f32.4d", DType::F32, {2, 3, 2, 2}, pattern(24 * 4, 7)},
      {"bf16", DType::BF16, {3, 1}, pattern(6, 8)},
  };
}

void expect_tensors_round_trip(uint32_t alignment) {
  SCOPED_TRACE(::testing::Message() << "alignment " << alignment);
  Writer writer(alignment);
  writer.set_string("general.architecture", "test");
  const auto tensors = several_tensors();
  for (const TestTensor& t : tensors) ASSERT_TRUE(writer.add_tensor(t.name, t.type, t.dims, t.data).ok());
  const std::string path = write_temp_file("tensors.gguf", writer.to_bytes());

  auto file = File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(file->name(), path);
  EXPECT_EQ(file->alignment(), alignment);
  EXPECT_EQ(file->has("general.alignment"), alignment != kDefaultAlignment);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  const uint8_t* first_data = file->tensors()[0].data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TestTensor& want = tensors[i];
    const TensorInfo& got = file->tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ(got.dims, want.dims);
    const int64_t n = std::accumulate(want.dims.begin(), want.dims.end(), int64_t{1}, std::multiplies<>());
    EXPECT_EQ(got.n_elements, n);
    EXPECT_EQ(got.rows(), n / want.dims[0]);
    EXPECT_EQ(got.n_bytes, want.data.size());
    EXPECT_EQ(got.offset % alignment, 0u);
    EXPECT_EQ(got.data, first_data + got.offset);
    ASSERT_NE(got.data, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(got.data, got.data + got.n_bytes), want.data);
    EXPECT_EQ(file->find_tensor(want.name), &got);
  }
  EXPECT_EQ(file->find_tensor("missing"), nullptr);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesAreByteExactAtDefaultAlignment) { expect_tensors_round_trip(32); }

TEST(GgufRoundTrip, CustomAlignmentsAreRecordedAndHonoured) {
  for (uint32_t alignment : {1u, 8u, 64u, 4096u}) expect_tensors_round_trip(alignment);
}

TEST(GgufRoundTrip, TensorDataStaysValidAfterTheFileIsMoved) {
  Writer writer;
  const std::vector<uint8_t> data = pattern(16, 9);
  ASSERT_TRUE(writer.add_tensor("t", DType::F32, {4}, data).ok());
  const std::string path = write_temp_file("moved.gguf", writer.to_bytes());
  auto opened = File::open(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  File moved = std::move(opened).value();
  File target = std::move(moved);
  const TensorInfo* t = target.find_tensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), data);
}

TEST(GgufWriter, RefusesTensorsItCannotDescribe) {
  Writer writer;
  const std::vector<uint8_t> four_floats(16);
  const Status no_dims = writer.add_tensor("a", DType::F32, {}, four_floats);
  ASSERT_FALSE(no_dims.ok());
  EXPECT_THAT(no_dims.error().message(), HasSubstr("'a'"));
  EXPECT_FALSE(writer.add_tensor("b", DType::F32, {3}, four_floats).ok());
  EXPECT_FALSE(writer.add_tensor("c", DType::F32, {0}, {}).ok());
  EXPECT_FALSE(writer.add_tensor("d", DType::F32, {-4}, four_floats).ok());
  EXPECT_FALSE(writer.add_tensor("e", DType::Q8_0, {4}, four_floats).ok());
  EXPECT_FALSE(writer.add_tensor("f", static_cast<DType>(4), {4}, four_floats).ok());
  EXPECT_FALSE(writer.add_tensor("g", DType::F32, {int64_t{1} << 40, int64_t{1} << 40}, four_floats).ok());
  EXPECT_TRUE(writer.add_tensor("ok", DType::F32, {4}, four_floats).ok());
}

TEST(GgufWriter, WritesToDiskAndReportsUnwritablePaths) {
  Writer writer;
  writer.set_string("k", "v");
  const std::string path = temp_path("written.gguf");
  ASSERT_TRUE(writer.write(path).ok());
  auto file = File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(*file->get_string("k"), "v");

  const Status bad = writer.write("/nonexistent-dir/x.gguf");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("/nonexistent-dir/x.gguf"));
}

class GgufGetters : public ::testing::Test {
 protected:
  void SetUp() override {
    Writer writer;
    writer.set_string("s", "text");
    writer.set_u32("u32", 7);
    writer.set_i32("i32", -3);
    writer.set("u64.big", Value{uint64_t{1} << 63});
    writer.set("u8", Value{uint8_t{200}});
    writer.set_f32("f32", 0.25f);
    writer.set("f64", Value{2.5});
    writer.set_bool("b", true);
    writer.set_string_array("strings", {"x", "", "z"});
    writer.set_f32_array("floats", {1.0f, -2.5f});
    writer.set_i32_array("ints", {4, -5, 6});
    writer.set("mixed", Value{Array{ValueType::kArray, {Value{Array{ValueType::kInt32, {}}}}}});
    bytes_ = writer.to_bytes();
    auto file = File::parse(bytes_, "getters.gguf");
    ASSERT_TRUE(file.ok()) << file.error().message();
    file_.emplace(std::move(file).value());
  }

  // A wrong-type or missing key must name the file, the key and the problem.
  template <class T>
  void expect_error(const Result<T>& result, const std::string& key, const std::string& problem) {
    ASSERT_FALSE(result.ok()) << key;
    EXPECT_THAT(result.error().message(), HasSubstr("getters.gguf"));
    EXPECT_THAT(result.error().message(), HasSubstr("'" + key + "'"));
    EXPECT_THAT(result.error().message(), HasSubstr(problem));
  }

  std::vector<uint8_t> bytes_;
  std::optional<File> file_;
};

TEST_F(GgufGetters, ReturnValuesOfMatchingTypes) {
  EXPECT_EQ(*file_->get_string("s"), "text");
  EXPECT_EQ(*file_->get_int("u32"), 7);
  EXPECT_EQ(*file_->get_int("i32"), -3);
  EXPECT_EQ(*file_->get_int("u8"), 200);
  EXPECT_EQ(*file_->get_float("f32"), 0.25);
  EXPECT_EQ(*file_->get_float("f64"), 2.5);
  EXPECT_EQ(*file_->get_float("i32"), -3.0);  // integers are numbers too
  EXPECT_EQ(*file_->get_bool("b"), true);
  EXPECT_EQ(*file_->get_string_array("strings"), (std::vector<std::string>{"x", "", "z"}));
  EXPECT_EQ(*file_->get_float_array("floats"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(*file_->get_float_array("ints"), (std::vector<float>{4.0f, -5.0f, 6.0f}));
  EXPECT_EQ(*file_->get_int_array("ints"), (std::vector<int64_t>{4, -5, 6}));
}

TEST_F(GgufGetters, WrongTypesNameTheKey) {
  expect_error(file_->get_string("u32"), "u32", "expected a string, found uint32");
  expect_error(file_->get_int("s"), "s", "expected an integer, found string");
  expect_error(file_->get_int("f32"), "f32", "expected an integer, found float32");
  expect_error(file_->get_int("b"), "b", "expected an integer, found bool");
  expect_error(file_->get_int("u64.big"), "u64.big", "expected an integer");
  expect_error(file_->get_float("s"), "s", "expected a number, found string");
  expect_error(file_->get_bool("u8"), "u8", "expected a bool, found uint8");
  expect_error(file_->get_string_array("ints"), "ints", "expected an array of strings");
  expect_error(file_->get_string_array("s"), "s", "expected an array of strings");
  expect_error(file_->get_float_array("strings"), "strings", "expected an array of numbers");
  expect_error(file_->get_int_array("floats"), "floats", "expected an array of integers");
  expect_error(file_->get_int_array("mixed"), "mixed", "expected an array of integers");
  expect_error(file_->get_int_array("i32"), "i32", "expected an array of integers");
}

TEST_F(GgufGetters, MissingKeysNameTheKey) {
  expect_error(file_->get_string("nope"), "nope", "missing");
  expect_error(file_->get_int("nope"), "nope", "missing");
  expect_error(file_->get_float("nope"), "nope", "missing");
  expect_error(file_->get_bool("nope"), "nope", "missing");
  expect_error(file_->get_string_array("nope"), "nope", "missing");
  expect_error(file_->get_float_array("nope"), "nope", "missing");
  expect_error(file_->get_int_array("nope"), "nope", "missing");
  EXPECT_FALSE(file_->has("nope"));
  EXPECT_EQ(file_->find("nope"), nullptr);
}

TEST_F(GgufGetters, FallbacksApplyOnlyToMissingKeys) {
  EXPECT_EQ(*file_->get_int_or("nope", 42), 42);
  EXPECT_EQ(*file_->get_float_or("nope", 1.5), 1.5);
  EXPECT_EQ(*file_->get_bool_or("nope", true), true);
  EXPECT_EQ(*file_->get_string_or("nope", "dflt"), "dflt");
  EXPECT_EQ(*file_->get_int_or("u32", 42), 7);
  EXPECT_EQ(*file_->get_string_or("s", "dflt"), "text");
  expect_error(file_->get_int_or("s", 42), "s", "expected an integer");
  expect_error(file_->get_float_or("s", 1.5), "s", "expected a number");
  expect_error(file_->get_bool_or("s", true), "s", "expected a bool");
  expect_error(file_->get_string_or("u32", "dflt"), "u32", "expected a string");
}

std::vector<uint8_t> with_version(std::vector<uint8_t> bytes, uint32_t version) {
  std::memcpy(bytes.data() + 4, &version, sizeof(version));
  return bytes;
}

TEST(GgufVersions, Version2ParsesLikeVersion3) {
  Writer writer;
  writer.set_string("general.architecture", "test");
  const std::vector<uint8_t> data = pattern(32, 1);
  ASSERT_TRUE(writer.add_tensor("t", DType::F32, {8}, data).ok());
  const std::vector<uint8_t> v2 = with_version(writer.to_bytes(), 2);
  auto file = File::parse(v2, "v2.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(*file->get_string("general.architecture"), "test");
  ASSERT_NE(file->find_tensor("t"), nullptr);
  EXPECT_EQ(std::vector<uint8_t>(file->find_tensor("t")->data, file->find_tensor("t")->data + 32), data);
}

TEST(GgufVersions, OtherVersionsAreRefused) {
  const std::vector<uint8_t> bytes = Writer().to_bytes();
  for (uint32_t version : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    const std::vector<uint8_t> patched = with_version(bytes, version);
    auto file = File::parse(patched, "old.gguf");
    ASSERT_FALSE(file.ok()) << version;
    EXPECT_THAT(file.error().message(), HasSubstr("old.gguf"));
    EXPECT_THAT(file.error().message(), HasSubstr("unsupported GGUF version " + std::to_string(version)));
  }
}

}  // namespace
}  // namespace mnemo::gguf
