// Sizes on the command line: binary suffixes, optional B/iB, plain bytes, and rejected input.
#include <gtest/gtest.h>

#include "sim/byte_size.h"

namespace mnemo::sim {
namespace {

TEST(ByteSize, ParsesPlainNumbersAndBinarySuffixes) {
  EXPECT_EQ(*parse_byte_size("18432"), 18432);
  EXPECT_EQ(*parse_byte_size("0"), 0);
  EXPECT_EQ(*parse_byte_size("512B"), 512);
  EXPECT_EQ(*parse_byte_size("4K"), 4096);
  EXPECT_EQ(*parse_byte_size("64M"), 64ll << 20);
  EXPECT_EQ(*parse_byte_size("64m"), 64ll << 20);
  EXPECT_EQ(*parse_byte_size("64MB"), 64ll << 20);
  EXPECT_EQ(*parse_byte_size("64MiB"), 64ll << 20);
  EXPECT_EQ(*parse_byte_size("1.5G"), 3ll << 29);
  EXPECT_EQ(*parse_byte_size("2T"), 2ll << 40);
}

TEST(ByteSize, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "M", "-1", "64X", "64 M", "64MiBs", "12iB", "nan", "inf", "1e30"}) {
    const auto parsed = parse_byte_size(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.error().message().find('\''), std::string::npos) << parsed.error().message();
    }
  }
}

TEST(ByteSize, FormatsForReports) {
  EXPECT_EQ(format_byte_size(512), "512 B");
  EXPECT_EQ(format_byte_size(64ll << 20), "64 MiB");
  EXPECT_EQ(format_byte_size(3ll << 29), "1.5 GiB");
  EXPECT_EQ(format_byte_size(18432 * 32), "576 KiB");
}

}  // namespace
}  // namespace mnemo::sim
