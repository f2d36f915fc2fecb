// A state folder's name: made once, the same on every later open, refused when damaged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/state_id.h"

namespace mnemo {
namespace {

std::string fresh_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string("mnemo-state-id-") + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(StateId, IsMadeOnceAndReadBackTheSame) {
  const std::string dir = fresh_dir("same");
  auto first = state_id_of(dir);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(first->size(), 32u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos) << *first;
  auto again = state_id_of(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  // Another folder is another state.
  auto other = state_id_of(fresh_dir("other"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
  // No temporary file is left behind.
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(StateId, ADamagedIdIsAnErrorNotANewState) {
  const std::string dir = fresh_dir("damaged");
  std::ofstream(dir + "/state-id") << "not-hex\n";
  auto id = state_id_of(dir);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message().find("not a state id"), std::string::npos) << id.error().message();
}

TEST(StateId, AnUnwritableFolderIsAnError) {
  auto id = state_id_of("/nonexistent-mnemo-folder/for/state");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message().find("cannot write"), std::string::npos) << id.error().message();
}

}  // namespace
}  // namespace mnemo
