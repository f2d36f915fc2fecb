// Invariant checks for programming errors (never for bad input, which gets a Result error):
// a violated invariant means state is already corrupt, so the process stops with a message
// rather than continue and serve wrong results.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#define MNEMO_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond,      \
                   fmt::format(__VA_ARGS__).c_str());                                       \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)
