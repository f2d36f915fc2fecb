// Prometheus text exposition of the engine's metrics.
#pragma once

#include <string>

#include "engine/engine_metrics.h"

namespace mnemo::server {

std::string render_metrics(const MetricsSnapshot& m);

}  // namespace mnemo::server
