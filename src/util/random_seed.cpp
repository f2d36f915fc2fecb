#include "util/random_seed.h"

#include <random>

namespace mnemo {

uint64_t random_seed() {
  thread_local std::mt19937_64 generator{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  return generator() >> 2;
}

}  // namespace mnemo
