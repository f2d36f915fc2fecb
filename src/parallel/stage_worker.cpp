#include "parallel/stage_worker.h"

#include <cstdio>

#include "parallel/model_fingerprint.h"
#include "parallel/token_kv.h"
#include "util/thread_name.h"

namespace mnemo::parallel {
namespace {

// Frames waiting for the compute thread: a coordinator has a pass's microbatches (or one
// restore) in flight; beyond this a sender is refused rather than queued without bound.
constexpr size_t kMaxQueuedFrames = 1024;

}  // namespace

Result<std::unique_ptr<StageWorker>> StageWorker::start(const StageWorkerOptions& options) {
  MNEMO_ASSIGN_OR_RETURN(const uint64_t fingerprint, stage_model_fingerprint(options.model_path));
  std::unique_ptr<StageWorker> worker(new StageWorker(options, fingerprint));
  StageLink::Options link_options;
  link_options.cluster_secret = options.cluster_secret;
  MNEMO_ASSIGN_OR_RETURN(worker->link_, StageLink::listen(options.host, options.port,
                                                          [w = worker.get()](StageFrame&& frame) { return w->on_frame(std::move(frame)); },
                                                          link_options));
  worker->thread_ = std::thread([w = worker.get()] { w->run(); });
  return worker;
}

StageWorker::StageWorker(StageWorkerOptions options, uint64_t model_fingerprint)
    : options_(std::move(options)), model_fingerprint_(model_fingerprint), pool_(options_.threads) {}

StageWorker::~StageWorker() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  link_.reset();  // its progress thread calls on_frame: gone before the rest
}

StageWorker::Stats StageWorker::stats() const {
  Stats stats;
  {
    std::lock_guard lock(queue_mutex_);
    stats = stats_;
  }
  std::lock_guard lock(model_mutex_);
  if (swap_ != nullptr) stats.swap = swap_->stats();
  return stats;
}

Status StageWorker::on_frame(StageFrame&& frame) {
  if (lost_.load()) return make_error(ErrorCode::kUnavailable, "stage at {} is lost (simulate_loss)", endpoint());
  switch (frame.kind) {
    case StageFrameKind::kSetup:
      return set_up(frame.setup);
    case StageFrameKind::kRows:
    case StageFrameKind::kTensorRows:
      if (frame.route.empty()) return make_error("a rows frame with no route: nowhere to send its result");
      return enqueue(std::move(frame));
    case StageFrameKind::kKv:
      return take_kv(frame);
    case StageFrameKind::kPing:
      return ok_status();
    case StageFrameKind::kRestore:
      if (frame.route.size() != 2) return make_error("a restore names its target and the coordinator, {} endpoints here", frame.route.size());
      return enqueue(std::move(frame));
    case StageFrameKind::kPull:
    case StageFrameKind::kPush:
    case StageFrameKind::kCopy:
      if (frame.route.size() != 1) {
        return make_error("a KV block operation names the coordinator, {} endpoints here", frame.route.size());
      }
      if (frame.replicas.size() > 1) return make_error("a push goes on to one replica holder, not {}", frame.replicas.size());
      return enqueue(std::move(frame));
    case StageFrameKind::kError:
    case StageFrameKind::kRestored:
      break;
  }
  return make_error("a stage takes setup, rows, kv, restore, ping, pull, push and copy frames, not answers");
}

Status StageWorker::enqueue(StageFrame&& frame) {
  {
    std::lock_guard lock(queue_mutex_);
    if (queue_.size() >= kMaxQueuedFrames) return make_error("stage at {} is busy: {} frames queued", endpoint(), queue_.size());
    queue_.push_back(std::move(frame));
  }
  queue_cv_.notify_one();
  return ok_status();
}

Status StageWorker::set_up(const StageSetup& setup) {
  if (setup.model_fingerprint != model_fingerprint_) {
    return make_error("stage set up for another model: this worker holds {} (fingerprint {:#x}, the coordinator's {:#x})",
                      options_.model_path, model_fingerprint_, setup.model_fingerprint);
  }
  LoadOptions load;
  load.layer_begin = setup.layer_begin;
  load.layer_end = setup.layer_end;
  load.head = false;
  load.tensor_rank = setup.tensor_rank;
  load.tensor_ranks = setup.tensor_ranks;
  load.prepack_budget_bytes = options_.prepack_budget_bytes;
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(options_.model_path, load));
  const KvLayout layout = model->stage_kv_layout(setup.block_size, setup.kv_dtype);
  auto kv = std::make_unique<KvStorage>(layout, setup.n_blocks);
  std::unique_ptr<KvStorage> device;
  std::unique_ptr<MicrobatchSwap> swap;
  const int64_t device_blocks = options_.device_pool_tokens / setup.block_size;
  if (options_.device_pool_tokens > 0 && device_blocks < setup.n_blocks) {
    if (device_blocks == 0) {
      return make_error("a device pool of {} tokens holds no block of {}", options_.device_pool_tokens, setup.block_size);
    }
    device = std::make_unique<KvStorage>(layout, static_cast<int32_t>(device_blocks));
    swap = std::make_unique<MicrobatchSwap>(*kv, *device);
  }
  {
    std::lock_guard lock(model_mutex_);
    swap_ = std::move(swap);  // before the pools it copies between
    device_ = std::move(device);
    model_ = std::move(model);
    kv_ = std::move(kv);
    setup_ = setup;
    written_.assign(static_cast<size_t>(setup.n_blocks), 0);
    std::lock_guard replica_lock(replica_mutex_);
    replicas_.clear();
    replica_layout_ = kv_->layout();
    model_layers_ = model_->config().n_layers;
    replica_n_blocks_ = setup.n_blocks;
  }
  std::lock_guard lock(queue_mutex_);
  ++stats_.setups;
  std::printf("mnemo worker: stage of layers [%d, %d), %d KV blocks of %d tokens%s\n", setup.layer_begin, setup.layer_end,
              setup.n_blocks, setup.block_size,
              swap_ ? fmt::format(" in host memory, microbatches swapped into a pool of {}", device_->n_blocks()).c_str() : "");
  std::fflush(stdout);
  return ok_status();
}

void StageWorker::run() {
  name_this_thread("mnemo-stage");
  for (;;) {
    StageFrame frame;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      frame = std::move(queue_.front());
      queue_.pop_front();
    }
    if (frame.kind == StageFrameKind::kRestore || frame.kind == StageFrameKind::kPull || frame.kind == StageFrameKind::kPush ||
        frame.kind == StageFrameKind::kCopy) {
      const Status done = frame.kind == StageFrameKind::kRestore ? restore(frame) : run_block_op(frame);
      if (!done.ok()) send_error(frame, done.error().message());
      continue;
    }
    const bool tensor = frame.kind == StageFrameKind::kTensorRows;
    const Status status = tensor ? run_tensor_part(frame) : run_rows(frame);
    {
      std::lock_guard lock(queue_mutex_);
      ++(status.ok() ? stats_.microbatches_run : stats_.microbatches_failed);
      stats_.tokens_replicated = tokens_replicated_;
    }
    if (!status.ok()) {
      send_error(frame, status.error().message());
    } else if (tensor) {  // this rank's share goes back to the coordinator
      frame.kind = StageFrameKind::kRows;
      const std::string coordinator = frame.route.back();
      frame.route.clear();
      (void)link_->send(coordinator, frame, options_.send_timeout_seconds);
    } else {
      send_on(std::move(frame));
    }
  }
}

// A pipeline stage's microbatch: its layers, then its KV to the frame's first replica holder.
Status StageWorker::run_rows(StageFrame& frame) {
  MNEMO_RETURN_IF_ERROR(compute(frame));
  if (frame.replicas.empty()) return ok_status();
  const std::string holder = frame.replicas.front();
  frame.replicas.erase(frame.replicas.begin());
  return replicate(frame, holder);
}

// A tensor rank's share of one block. The pass's KV is all stored once the last layer's
// attention ran: replicated then on the next rank (frame.replicas lists the ranks), before this
// rank answers, so every pass that completed is replicated.
Status StageWorker::run_tensor_part(StageFrame& frame) {
  bool pass_stored = false;
  MNEMO_RETURN_IF_ERROR(compute_tensor_part(frame, pass_stored));
  if (!pass_stored || frame.replicas.empty()) return ok_status();
  return replicate(frame, frame.replicas[(frame.microbatch + 1) % frame.replicas.size()]);
}

// Marks the blocks `sequences` wrote (restores send only those). Caller holds model_mutex_.
void StageWorker::mark_written(const std::vector<SequenceInput>& sequences) {
  for (const auto& [block, slot] : written_slots(sequences, setup_.block_size)) written_[static_cast<size_t>(block)] = 1;
}

void StageWorker::send_error(const StageFrame& about, const std::string& message) {
  StageFrame error;
  error.kind = StageFrameKind::kError;
  error.step = about.step;
  error.microbatch = about.microbatch;
  error.error = message.substr(0, StageFrameLimits{}.max_error_bytes);
  (void)link_->send(about.route.back(), error, options_.send_timeout_seconds);
}

// A tensor worker's share of one layer's attention or FFN: the frame's rows in, its partial out,
// its rank as the frame's microbatch; `pass_stored`: this was the last layer's attention.
Status StageWorker::compute_tensor_part(StageFrame& frame, bool& pass_stored) {
  std::lock_guard lock(model_mutex_);
  if (model_ == nullptr) return make_error("tensor worker at {} is not set up", endpoint());
  if (setup_.tensor_ranks < 2) return make_error("a pipeline stage at {} takes rows, not tensor parts", endpoint());
  if (frame.n_embd != model_->config().n_embd) return make_error("rows of {} floats for a model of {}", frame.n_embd, model_->config().n_embd);
  Batch batch;
  batch.sequences = std::move(frame.sequences);
  std::vector<float> part(frame.rows.size());
  const Status status = model_->tensor_partial(batch, frame.tensor_layer,
                                               frame.tensor_part == 0 ? Model::TensorPart::kAttention : Model::TensorPart::kFeedForward,
                                               frame.rows, part, *kv_, pool_);
  frame.sequences = std::move(batch.sequences);
  if (!status.ok()) return make_error("tensor rank {} of {}: {}", setup_.tensor_rank, setup_.tensor_ranks, status.error().message());
  if (frame.tensor_part == 0) mark_written(frame.sequences);
  frame.rows = std::move(part);
  frame.microbatch = static_cast<uint32_t>(setup_.tensor_rank);
  pass_stored = frame.tensor_part == 0 && frame.tensor_layer == setup_.layer_end - 1;
  return ok_status();
}

Status StageWorker::compute(StageFrame& frame) {
  std::lock_guard lock(model_mutex_);
  if (model_ == nullptr) return make_error("stage at {} is not set up", endpoint());
  if (frame.n_embd != model_->config().n_embd) {
    return make_error("rows of {} floats for a model of {}", frame.n_embd, model_->config().n_embd);
  }
  Batch batch;
  batch.sequences = std::move(frame.sequences);
  for (SequenceInput& s : batch.sequences) s.logits = LogitsFor::kNone;
  const Status status = swap_ == nullptr ? model_->run_layers(batch, frame.rows, *kv_, pool_)
                                         : swap_->run(batch, setup_.layer_begin, [&](const Batch& swapped) {
                                             return model_->run_layers(swapped, frame.rows, *device_, pool_);
                                           });
  frame.sequences = std::move(batch.sequences);
  if (!status.ok()) {
    return make_error("stage of layers [{}, {}): {}", setup_.layer_begin, setup_.layer_end, status.error().message());
  }
  mark_written(frame.sequences);
  return ok_status();
}

void StageWorker::send_on(StageFrame&& frame) {
  const std::string next = frame.route.front();
  const std::string coordinator = frame.route.back();
  frame.route.erase(frame.route.begin());
  const Status sent = link_->send(next, frame, options_.send_timeout_seconds);
  if (sent.ok() || next == coordinator) return;
  frame.route.push_back(coordinator);  // send_error answers the route's last
  send_error(frame, fmt::format("stage at {} could not send microbatch {} on to {}: {}", endpoint(), frame.microbatch, next,
                                sent.error().message()));
}

}  // namespace mnemo::parallel
