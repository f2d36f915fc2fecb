// A fresh sampling seed for a request that gives none: different on every call, in 0..2^62 so
// that it travels through JSON as a plain integer (a router writes it into the request it
// forwards, so that every instance the request reaches samples alike).
#pragma once

#include <cstdint>

namespace mnemo {

uint64_t random_seed();

}  // namespace mnemo
