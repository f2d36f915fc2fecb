// Which model file a pipeline's stages hold: a stage refuses to be set up for another model
// than the coordinator's, since rows of one model's residual stream mean nothing to another's
// layers. The file's size and a hash of its first bytes (the GGUF header: metadata and tensor
// table, with the first tensors' data), so two paths to one file agree.
#pragma once

#include <cstdint>
#include <string>

#include "util/result.h"

namespace mnemo::parallel {

Result<uint64_t> stage_model_fingerprint(const std::string& model_path);

}  // namespace mnemo::parallel
