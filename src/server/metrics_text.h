// Prometheus text exposition of the engine's metrics.
#pragma once

#include <string>

#include "engine/engine_metrics.h"
#include "server/kv_receiver.h"
#include "server/kv_replicator.h"
#include "transfer/kv_transport.h"

namespace mnemo::server {

std::string render_metrics(const MetricsSnapshot& m);
// The KV transport's counters (instances in a cluster).
std::string render_transport_metrics(const transfer::KvTransport::Stats& stats);
// Replicas of requests in flight sent from here (SPEC D7).
std::string render_replication_metrics(const ReplicationStats& stats);
// KV received from other instances, layer slices gathered into whole chunks (SPEC D3).
std::string render_receiver_metrics(const KvReceiver::Stats& stats);

}  // namespace mnemo::server
