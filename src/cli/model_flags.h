// Model-loading flags shared by the commands that run a model (serve, bench).
#pragma once

#include <cstddef>
#include <cstdint>

#include <CLI/CLI.hpp>

#include "model/weights.h"

namespace mnemo::cli {

struct ModelFlags {
  int64_t prepack_mib = static_cast<int64_t>(LoadOptions{}.prepack_budget_bytes >> 20);

  LoadOptions load_options() const { return LoadOptions{static_cast<size_t>(prepack_mib) << 20}; }

  void add_to(CLI::App* cmd) {
    cmd->add_option("--prepack-mib", prepack_mib,
                    "Memory beyond the model file for weights repacked once at load for batched products (MiB)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  }
};

}  // namespace mnemo::cli
