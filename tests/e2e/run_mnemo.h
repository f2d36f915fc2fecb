// Runs the mnemo executable (MNEMO_BIN, set by CMake) with arguments and captures its exit code
// and its stdout and stderr together.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace mnemo::testing {

struct CommandResult {
  int status;
  std::string output;
};

inline CommandResult run_mnemo(const std::string& args) {
  const std::string command = std::string(MNEMO_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return {-1, ""};
  std::string output;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

}  // namespace mnemo::testing
