// The name of a folder of durable state, the same every time a process opens it: written once as
// a random hex string to `<dir>/state-id` (a temporary file renamed into place, so a crash never
// leaves half a name), read back afterwards. A router recognises a restarted instance by it.
#pragma once

#include <string>

#include "util/result.h"

namespace mnemo {

Result<std::string> state_id_of(const std::string& dir);

}  // namespace mnemo
