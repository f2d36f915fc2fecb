// AnonymousMemory: zeroed, writable to its last byte, moved without copying, empty at 0 bytes.
#include "util/anonymous_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace mnemo {
namespace {

TEST(AnonymousMemory, IsZeroedAndWritableToItsLastByte) {
  // Not a multiple of the page size, larger than a huge page.
  constexpr size_t kBytes = (size_t{5} << 20) + 12345;
  AnonymousMemory memory(kBytes);
  ASSERT_NE(memory.data(), nullptr);
  ASSERT_EQ(memory.size(), kBytes);
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(memory.data()[i], 0) << i;
  EXPECT_EQ(memory.data()[kBytes - 1], 0);
  std::memset(memory.data(), 0xab, kBytes);
  EXPECT_EQ(memory.data()[kBytes - 1], 0xab);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % 4096, 0u);  // page-aligned
}

TEST(AnonymousMemory, MovesOwnershipAndIsEmptyAtZeroBytes) {
  AnonymousMemory empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  AnonymousMemory a(1 << 16);
  a.data()[7] = 42;
  uint8_t* const bytes = a.data();
  AnonymousMemory b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), bytes);
  EXPECT_EQ(b.data()[7], 42);
  AnonymousMemory c(1 << 12);
  c = std::move(b);  // c's own mapping is released
  EXPECT_EQ(c.data(), bytes);
  EXPECT_EQ(c.size(), size_t{1} << 16);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace mnemo
