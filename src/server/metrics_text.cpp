#include "server/metrics_text.h"

#include <fmt/format.h>

#include "util/prometheus_text.h"

namespace mnemo::server {
namespace {

template <typename T>
void counter(std::string& out, const char* name, const char* help, T value) {
  prometheus::counter(out, name, help, value);
}

void gauge(std::string& out, const char* name, const char* help, double value) { prometheus::gauge(out, name, help, value); }

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  prometheus::header(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("mnemo_{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cumulative);
  }
  out += fmt::format("mnemo_{0}_bucket{{le=\"+Inf\"}} {1}\nmnemo_{0}_sum {2}\nmnemo_{0}_count {1}\n", name, h.count, h.sum);
}

// Speculative decoding's counters, by drafter.
void speculation_counters(std::string& out, const MetricsSnapshot& m) {
  counter(out, "decode_passes_total",
          "Sequences' passes that sampled tokens (one per sequence and pass): generation_tokens_total over these is the "
          "tokens per forward.",
          m.decode_passes_total);
  prometheus::header(out, "spec_draft_tokens_total", "Speculative tokens drafted and verified, by drafter.", "counter");
  for (size_t d = 0; d < kDrafterNames.size(); ++d) {
    out += fmt::format("mnemo_spec_draft_tokens_total{{drafter=\"{}\"}} {}\n", kDrafterNames[d], m.spec_draft_tokens[d]);
  }
  prometheus::header(out, "spec_accepted_tokens_total", "Speculative tokens kept (what the sampler drew anyway), by drafter.",
                     "counter");
  for (size_t d = 0; d < kDrafterNames.size(); ++d) {
    out += fmt::format("mnemo_spec_accepted_tokens_total{{drafter=\"{}\"}} {}\n", kDrafterNames[d], m.spec_accepted_tokens[d]);
  }
}

// KV moved between the tiers, and (model parallelism) between the cache and its workers.
void tier_traffic_counters(std::string& out, const MetricsSnapshot& m) {
  counter(out, "kv_bytes_device_to_host_total", "KV bytes copied from the device to the host tier.", m.bytes_device_to_host);
  counter(out, "kv_bytes_host_to_device_total", "KV bytes copied from the host tier to the device.", m.bytes_host_to_device);
  counter(out, "kv_bytes_to_disk_total", "KV bytes queued for writing to the disk tier.", m.bytes_to_disk);
  counter(out, "kv_bytes_disk_to_device_total", "KV bytes read from the disk tier to the device.", m.bytes_disk_to_device);
  counter(out, "cache_remote_pulled_blocks_total",
          "KV blocks the cache pulled from its model-parallel workers (a chunk leaving their device tier).",
          m.cache_remote_pulled_blocks);
  counter(out, "cache_remote_pushed_blocks_total",
          "KV blocks the cache pushed to its model-parallel workers (a chunk brought back to their device tier).",
          m.cache_remote_pushed_blocks);
  counter(out, "cache_remote_failures_total",
          "Pulls, pushes and copies the model-parallel workers could not do (their chunks dropped or recomputed).",
          m.cache_remote_failures);
}

}  // namespace

std::string render_transport_metrics(const transfer::KvTransport::Stats& s) {
  std::string out;
  counter(out, "kv_transfer_messages_sent_total", "KV transfers sent to other instances.", s.messages_sent);
  counter(out, "kv_transfer_messages_received_total", "KV transfers received and verified.", s.messages_received);
  counter(out, "kv_transfer_bytes_sent_total", "Bytes of KV transfers sent.", s.bytes_sent);
  counter(out, "kv_transfer_bytes_received_total", "Bytes of KV transfers received.", s.bytes_received);
  counter(out, "kv_transfer_rejected_total", "Received KV transfers that failed verification.", s.rejected);
  counter(out, "kv_transfer_refused_unauthenticated_total",
          "Received KV transfers refused for a missing or wrong MAC under the cluster secret.", s.refused_unauthenticated);
  counter(out, "kv_transfer_refused_replayed_total",
          "Received KV transfers refused as replays (a sender's sequence used before, or older than the window).",
          s.refused_replayed);
  counter(out, "kv_transfer_refused_oversized_total",
          "Received KV transfers refused for declared sizes beyond the receiver's limits or KV layout.", s.refused_oversized);
  counter(out, "kv_transfer_receive_buffers_total", "Received KV transfer bodies allocated (after their header was verified).",
          s.receive_buffers);
  counter(out, "kv_transfer_receive_buffer_bytes_total", "Bytes of those body buffers.", s.receive_buffer_bytes);
  counter(out, "kv_transfer_failed_sends_total", "KV transfers that were not acknowledged.", s.failed_sends);
  counter(out, "kv_transfer_staged_sends_total", "KV transfers encoded into a staging buffer.", s.staged_sends);
  counter(out, "kv_transfer_staging_reuses_total", "KV transfers encoded into a reused staging buffer (no allocation).",
          s.staging_reuses);
  return out;
}

std::string render_metrics(const MetricsSnapshot& m) {
  std::string out;
  counter(out, "requests_total", "Requests accepted by the engine.", m.requests_total);
  counter(out, "requests_finished_total", "Requests finished (any reason).", m.requests_finished);
  counter(out, "requests_cancelled_total", "Requests cancelled (client gone or shutdown).", m.requests_cancelled);
  counter(out, "prompt_tokens_total", "Prompt tokens of accepted requests.", m.prompt_tokens_total);
  counter(out, "generation_tokens_total", "Tokens generated.", m.generation_tokens_total);
  counter(out, "prefix_cache_hit_tokens_total", "Prompt tokens whose KV was reused from the cache.", m.prefix_cache_hit_tokens);
  counter(out, "preemptions_total", "Sequences preempted when the KV pool ran out.", m.preemptions_total);
  counter(out, "swaps_total", "Preemptions by swapping to host memory (the rest recompute).", m.swaps_total);
  counter(out, "steps_total", "Forward passes run.", m.steps_total);
  speculation_counters(out, m);
  gauge(out, "running_sequences", "Sequences in the running set.", static_cast<double>(m.running));
  gauge(out, "waiting_sequences", "Sequences waiting (new or preempted).", static_cast<double>(m.waiting));
  gauge(out, "kv_blocks_used", "KV blocks of the device pool in use by sequences.", static_cast<double>(m.kv_blocks_used));
  gauge(out, "kv_blocks_cached", "Device KV blocks kept by the prefix cache.", static_cast<double>(m.kv_blocks_cached));
  gauge(out, "host_blocks_cached", "Host KV blocks kept by the prefix cache.", static_cast<double>(m.host_blocks_cached));
  gauge(out, "host_blocks_total", "KV blocks in the host pool.", static_cast<double>(m.host_blocks_total));
  gauge(out, "host_exact_blocks_total", "Host KV blocks of the device's element type beside a compressed host (--kv-types).",
        static_cast<double>(m.host_exact_blocks_total));
  gauge(out, "host_compact_blocks_cached", "Host blocks holding only the global layers of sliding-window history.",
        static_cast<double>(m.host_compact_blocks_cached));
  gauge(out, "host_compact_blocks_total", "Host blocks for global-layer-only copies (sliding-window models).",
        static_cast<double>(m.host_compact_blocks_total));
  gauge(out, "device_compact_chunks_cached", "Cached chunks kept on the device as their global layers only (sliding-window history).",
        static_cast<double>(m.device_compact_chunks_cached));
  gauge(out, "device_compact_blocks", "Device KV blocks holding those global-layer-only copies, several per block.",
        static_cast<double>(m.device_compact_blocks));
  gauge(out, "disk_chunks_cached", "Cached chunks with a durable extent in the disk tier.", static_cast<double>(m.disk_chunks_cached));
  gauge(out, "disk_bytes_used", "Bytes of the disk tier in use (extents on disk or being written).", static_cast<double>(m.disk_bytes_used));
  gauge(out, "disk_bytes_total", "Capacity of the disk tier in bytes (0: no disk tier).", static_cast<double>(m.disk_bytes_total));
  gauge(out, "disk_writes_queued", "Extent writes and removals queued for the disk tier.", static_cast<double>(m.disk_writes_queued));
  gauge(out, "cache_chunks_dropped", "Indexed chunks whose KV is gone (recomputed when reused).", static_cast<double>(m.chunks_dropped_indexed));
  counter(out, "cache_device_hit_tokens_total", "Reused prompt tokens found on the device.", m.cache_device_hit_tokens);
  counter(out, "cache_host_hit_tokens_total", "Reused prompt tokens brought back from host memory.", m.cache_host_hit_tokens);
  counter(out, "cache_disk_hit_tokens_total", "Reused prompt tokens read back from the disk tier.", m.cache_disk_hit_tokens);
  counter(out, "cache_recomputed_tokens_total", "Cached prompt tokens whose KV had been dropped, computed again.", m.cache_recomputed_tokens);
  counter(out, "cache_demoted_chunks_total", "Cached chunks copied from device to host when the device needed room.", m.cache_demoted_chunks);
  counter(out, "cache_device_compacted_chunks_total", "Cached chunks shrunk on the device to their global layers when it needed room.",
          m.cache_device_compacted_chunks);
  counter(out, "cache_ahead_copied_chunks_total", "Cached chunks copied from device to host ahead of need.", m.cache_ahead_copied_chunks);
  counter(out, "cache_evicted_copies_total", "Copies of cached chunks that left a tier.", m.cache_evicted_copies);
  counter(out, "cache_dropped_chunks_total", "Cached chunks whose last copy was discarded.", m.cache_dropped_chunks);
  // The names of release 1 (they counted chunks as "blocks"), kept for one more release.
  counter(out, "cache_demoted_blocks_total", "Deprecated: cache_demoted_chunks_total.", m.cache_demoted_chunks);
  counter(out, "cache_ahead_copied_blocks_total", "Deprecated: cache_ahead_copied_chunks_total.", m.cache_ahead_copied_chunks);
  counter(out, "cache_dropped_blocks_total", "Deprecated: cache_dropped_chunks_total.", m.cache_dropped_chunks);
  counter(out, "cache_exported_chunks_total", "Cached chunks sent to another instance.", m.cache_exported_chunks);
  counter(out, "cache_imported_chunks_total", "Chunks received from another instance and cached.", m.cache_imported_chunks);
  counter(out, "cache_forgotten_chunks_total", "Cached chunks deleted with their conversation (DELETE /v1/responses).",
          m.cache_forgotten_chunks);
  counter(out, "cache_ended_chunks_total", "Cached chunks whose conversation its client ended (cache_control end).",
          m.cache_ended_chunks);
  counter(out, "cache_pinned_chunks_total", "Cached chunks pinned, or their pin extended, by a client's keep-alive (cache_control ttl).",
          m.cache_pinned_chunks);
  gauge(out, "cache_pinned_chunks", "Chunks pinned now (until their keep-alive runs out; expired pins lift at the next eviction).",
        static_cast<double>(m.cache_pinned_chunks_now));
  counter(out, "cache_disk_written_chunks_total", "Extents made durable in the disk tier.", m.cache_disk_written_chunks);
  counter(out, "cache_disk_corrupt_chunks_total", "Disk extents that failed their checksum and were dropped.", m.cache_disk_corrupt_chunks);
  counter(out, "cache_persisted_running_chunks_total",
          "Chunks of running requests cached (and written to the disk tier) as they filled, for a restart to resume them.",
          m.persisted_running_chunks);
  tier_traffic_counters(out, m);
  counter(out, "engine_task_seconds_total",
          "Engine-thread seconds spent on work posted by other threads (KV exports and imports, forgets).",
          m.engine_task_seconds);
  gauge(out, "kv_blocks_total", "KV blocks in the device pool.", static_cast<double>(m.kv_blocks_total));
  gauge(out, "kv_usage_ratio", "Share of the device KV pool in use.",
        m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / static_cast<double>(m.kv_blocks_total) : 0.0);
  histogram(out, "time_to_first_token_seconds", "Time from arrival to the first token.", m.ttft_seconds);
  histogram(out, "time_per_output_token_seconds", "Time between consecutive tokens of a sequence.", m.tpot_seconds);
  histogram(out, "batch_tokens", "Tokens per forward pass.", m.batch_tokens);
  return out;
}

std::string render_replication_metrics(const ReplicationStats& s) {
  std::string out;
  counter(out, "kv_replica_increments_total", "KV replica increments of requests in flight, acknowledged.", s.increments);
  counter(out, "kv_replica_failures_total", "KV replica increments refused or lost.", s.failures);
  counter(out, "kv_replica_chunks_total", "Chunks replicated to another instance.", s.chunks);
  counter(out, "kv_replica_bytes_total", "Bytes of KV replicated to another instance.", s.bytes);
  counter(out, "kv_replica_given_up_total", "Replicas abandoned after repeated failures.", s.given_up);
  counter(out, "kv_replica_layer_messages_total",
          "Messages of one layer of a prompt's chunks, sent while the prompt was computed (acknowledged).",
          s.layer_messages);
  return out;
}

std::string render_receiver_metrics(const KvReceiver::Stats& s) {
  std::string out;
  counter(out, "kv_received_layer_slices_total", "Layer slices of chunks received and kept until their chunks were whole.",
          s.slices);
  counter(out, "kv_received_assembled_total", "Chunk groups whose every layer arrived, handed to the cache.", s.assembled);
  counter(out, "kv_received_abandoned_total", "Chunk groups dropped with layers missing (sender gone, or too many).",
          s.abandoned);
  gauge(out, "kv_received_pending_assemblies", "Chunk groups waiting for layers.", static_cast<double>(s.pending));
  return out;
}

std::string render_edge_metrics(const EdgeStats& s) {
  std::string out;
  counter(out, "auth_refused_keys_total", "Requests refused for a missing or unknown API key.", s.refused_keys);
  counter(out, "auth_refused_peers_total", "Internal requests refused for a missing, stale, replayed or wrong peer signature.",
          s.refused_peers);
  gauge(out, "response_store_out_of_service", "1 if the Responses API store could not be opened (damaged or unreadable).",
        static_cast<double>(s.store_out_of_service));
  counter(out, "response_store_wal_frames_dropped_total",
          "Committed frames of the Responses store's WAL that SQLite's recovery dropped when it was opened (damaged).",
          s.store_wal_frames_dropped);
  return out;
}

std::string render_http_metrics(const http::ServerStats& s) {
  std::string out;
  gauge(out, "http_connections_open", "Client connections open now.", static_cast<double>(s.connections_open));
  counter(out, "http_connections_accepted_total", "Client connections accepted.", s.connections_accepted);
  counter(out, "http_connections_refused_total", "Client connections refused (503) over --max-connections.", s.connections_refused);
  counter(out, "http_timeouts_total", "Connections closed for a head, body, idle or write deadline.", s.timeouts);
  counter(out, "http_clients_gone_total", "Requests whose client went away before its answer was complete.", s.clients_gone);
  return out;
}

std::string render_disk_tier_metrics(const DiskTier::Stats& s) {
  std::string out;
  prometheus::header(out, "disk_scan_extents", "Extent files the disk tier's start-up scan found, by what it did with them.", "gauge");
  const std::pair<const char*, int64_t> outcomes[] = {{"kept", s.last_scan.kept},
                                                      {"dropped_header_checksum", s.last_scan.dropped_corrupt},
                                                      {"dropped_malformed", s.last_scan.dropped_malformed},
                                                      {"orphaned", s.last_scan.orphaned},
                                                      {"foreign", s.last_scan.foreign}};
  for (const auto& [outcome, n] : outcomes) out += fmt::format("mnemo_disk_scan_extents{{outcome=\"{}\"}} {}\n", outcome, n);
  gauge(out, "disk_scan_interrupted_writes", "Temporaries of interrupted disk tier writes deleted at start-up.",
        static_cast<double>(s.last_scan.temporaries));
  gauge(out, "disk_orphan_extents", "Intact extents kept on disk but not indexed (an earlier chunk's extent was missing or damaged).",
        static_cast<double>(s.orphans));
  gauge(out, "disk_orphan_bytes", "Bytes of orphaned extents (not in disk_bytes_used).", static_cast<double>(s.orphan_bytes));
  counter(out, "disk_orphans_reclaimed_total", "Orphaned extents deleted to make room for new ones.", s.orphans_reclaimed);
  return out;
}

}  // namespace mnemo::server
