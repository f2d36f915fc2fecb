// Prometheus text exposition of the engine's metrics.
#pragma once

#include <string>

#include "http/server.h"
#include "engine/engine_metrics.h"
#include "kv/disk_tier.h"
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

// What the edge refused, and whether the Responses store is in service.
struct EdgeStats {
  uint64_t refused_keys = 0;   // requests without a valid API key
  uint64_t refused_peers = 0;  // internal requests without a valid peer signature
  int store_out_of_service = 0;
  uint64_t store_wal_frames_dropped = 0;  // committed WAL frames SQLite's recovery dropped at open
};
std::string render_edge_metrics(const EdgeStats& stats);
std::string render_http_metrics(const http::ServerStats& stats);
std::string render_disk_tier_metrics(const DiskTier::Stats& stats);

}  // namespace mnemo::server
