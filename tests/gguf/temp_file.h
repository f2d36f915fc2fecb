// Files under the test's temporary directory, named per test so parallel tests do not collide.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace mnemo::gguf::testing {

inline std::string temp_path(const std::string& file_name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "mnemo_" + test->test_suite_name() + "_" + test->name() + "_" + file_name;
}

inline std::string write_temp_file(const std::string& file_name, const std::vector<uint8_t>& bytes) {
  const std::string path = temp_path(file_name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

}  // namespace mnemo::gguf::testing
