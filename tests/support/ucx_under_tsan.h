// UCX's memory hooks (libucm intercepts mmap and madvise, also in exiting threads) crash under
// ThreadSanitizer. libucm reads UCX_MEM_EVENTS when it is loaded, before any code of ours runs,
// so a TSan build of a test that uses UCX starts itself again with the hooks off (UCX then only
// skips its memory registration cache). Include this header in such a test: it runs before
// main, while the process has one thread. Other builds are unchanged.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace mnemo::testing {

inline bool restart_without_ucx_memory_hooks() {
  if (std::getenv("UCX_MEM_EVENTS") != nullptr) return true;
  ::setenv("UCX_MEM_EVENTS", "no", 1);
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  return false;  // exec failed: run with the hooks on
}

[[maybe_unused]] static const bool kUcxMemoryHooksOff = restart_without_ucx_memory_hooks();

}  // namespace mnemo::testing
#endif
