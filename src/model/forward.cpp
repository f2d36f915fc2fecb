// The forward pass over a ragged batch: every token of every sequence goes through each layer
// together (one matrix product per weight for the whole batch, Q/K/V and gate/up sharing their
// quantised input); only attention looks at sequences, through their block tables. Every
// operation is per token (or per (token, head) in attention) and computed the same way whatever
// else is in the batch, so a token's logits do not depend on the batch (batch invariance).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/nn/argmax.h"
#include "kernels/nn/attention.h"
#include "kernels/nn/f16_ops.h"
#include "kernels/nn/ops.h"
#include "model/model.h"
#include "model/rope_setup.h"

namespace mnemo {
namespace {

struct TokenPlace {
  int32_t sequence;
  int32_t position;
};

void resize(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// Per-row RMS norm of `rows` vectors of `n` elements.
void rms_norm_rows(const float* x, const std::vector<float>& weight, float* y, int64_t rows, int64_t n,
                   float eps, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) kernels::rms_norm(x + r * n, weight, y + r * n, n, eps);
  });
}

// The step between two sub-blocks in one pass over the rows (one pool job instead of three):
// h = post_norm(h) (when the model has post norms), x += h (times the residual scale, when not
// 1), then h = next_norm(x) (when given).
void residual_step(float* x, float* h, const std::vector<float>* post_norm, const std::vector<float>* next_norm,
                   float residual_scale, int64_t rows, int64_t n, float eps, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      float* hr = h + r * n;
      float* xr = x + r * n;
      if (post_norm != nullptr) kernels::rms_norm(hr, *post_norm, hr, n, eps);
      if (residual_scale != 1.0f) {
        for (int64_t i = 0; i < n; ++i) hr[i] *= residual_scale;
      }
      kernels::add_inplace(xr, hr, n);
      if (next_norm != nullptr) kernels::rms_norm(xr, *next_norm, hr, n, eps);
    }
  });
}

// Mistral 3's query temperature at a position (llama.cpp's, in double, then rounded).
float query_temperature(const ModelConfig& c, int32_t position) {
  const double steps = std::floor(static_cast<double>(position) / c.attention_temperature_length);
  return static_cast<float>(std::log(steps + 1.0) * c.attention_temperature_scale + 1.0);
}

void add_bias(float* x, const std::vector<float>& bias, int64_t rows) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < rows; ++r) kernels::add_inplace(x + r * n, bias.data(), n);
}

}  // namespace

// One forward pass's batch, flattened to one row per token, and the pool and buffers it uses.
struct Model::Pass {
  const Batch& batch;
  KvStorage& kv;
  ThreadPool& pool;
  int32_t kv_layer_base = 0;       // the model layer of the pool's first layer (a stage's first)
  std::vector<TokenPlace> places;  // per row: its sequence and position
  std::vector<TokenId> tokens;     // per row
  int64_t T = 0;                   // rows
  int64_t q_dim = 0, k_dim = 0, v_dim = 0, o_dim = 0;
  std::vector<kernels::AttentionQuery> queries;  // per row
};

Status Model::forward(const Batch& batch, KvStorage& kv, ThreadPool& pool, ForwardOutput& out) {
  if (weights_.shard.ranks > 1) return make_error("a tensor shard computes partial layers (tensor_partial), not a pass");
  if (!head_ || (layer_runner_ == nullptr && (layer_begin_ != 0 || layer_end_ != config_.n_layers))) {
    return make_error("this model holds layers [{}, {}){} of {}: a whole pass needs the others' runner", layer_begin_,
                      layer_end_, head_ ? "" : " without the head", config_.n_layers);
  }
  MNEMO_RETURN_IF_ERROR(validate(batch, kv, config_.n_layers));
  Pass p{batch, kv, pool, 0, {}, {}, 0, 0, 0, 0, 0, {}};
  flatten(p);
  prepare(p);
  embed(p);
  if (layer_runner_ != nullptr) {
    MNEMO_RETURN_IF_ERROR(layer_runner_->run_layers(batch, std::span<float>(scratch_.x.data(), static_cast<size_t>(p.T * config_.n_embd))));
  } else {
    run_local_layers(p, 0, config_.n_layers);
  }
  compute_hidden(p, out);
  compute_logits(p, out);
  return ok_status();
}

Status Model::run_layers(const Batch& batch, std::span<float> x, KvStorage& kv, ThreadPool& pool) {
  if (weights_.shard.ranks > 1) return make_error("a tensor shard computes partial layers (tensor_partial), not whole ones");
  Pass p{batch, kv, pool, layer_begin_, {}, {}, 0, 0, 0, 0, 0, {}};
  MNEMO_RETURN_IF_ERROR(begin_pass_over(p, x, scratch_.x));
  run_local_layers(p, layer_begin_, layer_end_);
  std::copy(scratch_.x.begin(), scratch_.x.begin() + static_cast<std::ptrdiff_t>(x.size()), x.begin());
  return ok_status();
}

Status Model::tensor_partial(const Batch& batch, int32_t il, TensorPart part, std::span<const float> h,
                             std::span<float> out, KvStorage& kv, ThreadPool& pool) {
  if (il < layer_begin_ || il >= layer_end_) return make_error("layer {} is not among this model's [{}, {})", il, layer_begin_, layer_end_);
  if (out.size() != h.size()) return make_error("a tensor part of {} floats answered in {}", h.size(), out.size());
  Pass p{batch, kv, pool, layer_begin_, {}, {}, 0, 0, 0, 0, 0, {}};
  MNEMO_RETURN_IF_ERROR(begin_pass_over(p, h, scratch_.h));
  if (part == TensorPart::kAttention) {
    attention_core(p, il);
  } else {
    ffn_core(p, il);
  }
  std::copy(scratch_.h.begin(), scratch_.h.begin() + static_cast<std::ptrdiff_t>(out.size()), out.begin());
  return ok_status();
}

// A pass over rows given from outside (a stage's, a shard's): the batch checked against a pool of
// this model's layers, its rows flattened, the buffers sized and `rows` (n_embd floats a token)
// copied into `into`.
Status Model::begin_pass_over(Pass& p, std::span<const float> rows, std::vector<float>& into) {
  MNEMO_RETURN_IF_ERROR(validate(p.batch, p.kv, layer_end_ - layer_begin_));
  flatten(p);
  if (rows.size() != static_cast<size_t>(p.T * config_.n_embd)) {
    return make_error("{} floats of rows for {} tokens of {}", rows.size(), p.T, config_.n_embd);
  }
  prepare(p);
  std::copy(rows.begin(), rows.end(), into.begin());
  return ok_status();
}

// One row per token, remembering its sequence and position.
void Model::flatten(Pass& p) {
  const ModelConfig& c = config_;
  for (size_t s = 0; s < p.batch.sequences.size(); ++s) {
    const SequenceInput& seq = p.batch.sequences[s];
    p.tokens.insert(p.tokens.end(), seq.tokens.begin(), seq.tokens.end());
    for (const QueryRange& r : seq.ranges) {
      for (int32_t pos = r.start; pos < r.end(); ++pos) p.places.push_back({static_cast<int32_t>(s), pos});
    }
  }
  p.T = static_cast<int64_t>(p.tokens.size());
  p.q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim_k;
  p.k_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim_k;
  p.v_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim_v;
  p.o_dim = static_cast<int64_t>(c.n_heads) * c.head_dim_v;
}

// Layers [begin, end) over x; h = attn_norm(x) first, as the layer before would have left it.
void Model::run_local_layers(Pass& p, int32_t begin, int32_t end) {
  const ModelConfig& c = config_;
  if (begin < end) {
    rms_norm_rows(scratch_.x.data(), weights_.layers[static_cast<size_t>(begin)].attn_norm, scratch_.h.data(), p.T, c.n_embd,
                  c.rms_eps, p.pool);
  }
  for (int32_t il = begin; il < end; ++il) {
    attention_block(p, il);
    ffn_block(p, il, end);
  }
}

// The buffers for the pass's rows and each row's attention query.
void Model::prepare(Pass& p) {
  const ModelConfig& c = config_;
  const int64_t n_embd = c.n_embd;
  const int64_t T = p.T;
  Scratch& b = scratch_;
  resize(b.x, T * n_embd);
  resize(b.h, T * n_embd);
  resize(b.q, T * p.q_dim);
  resize(b.k, T * p.k_dim);
  resize(b.v, T * p.v_dim);
  resize(b.attn, T * p.o_dim);
  resize(b.gate, T * c.n_ff);
  resize(b.up, T * c.n_ff);
  resize(b.ffn, T * c.n_ff);
  p.queries.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const TokenPlace& place = p.places[static_cast<size_t>(t)];
    p.queries[static_cast<size_t>(t)] = {b.q.data() + t * p.q_dim, b.attn.data() + t * p.o_dim, place.position,
                                          p.batch.sequences[static_cast<size_t>(place.sequence)].block_table};
  }
}

// The token rows' embeddings into x.
void Model::embed(Pass& p) {
  const ModelConfig& c = config_;
  const int64_t n_embd = c.n_embd;
  for (int64_t t = 0; t < p.T; ++t) {
    float* row = scratch_.x.data() + t * n_embd;
    kernels::dequantize_row(weights_.token_embedding, p.tokens[static_cast<size_t>(t)], row);
    if (c.embedding_scale != 1.0f) {
      for (int64_t i = 0; i < n_embd; ++i) row[i] *= c.embedding_scale;
    }
  }
}

// h holds attn_norm(x) (from the step before); leaves x += attention, h = ffn_norm(x).
void Model::attention_block(Pass& p, int32_t il) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  attention_core(p, il);
  residual_step(scratch_.x.data(), scratch_.h.data(), c.has_post_norms ? &w.post_attn_norm : nullptr, &w.ffn_norm,
                c.residual_scale, p.T, c.n_embd, c.rms_eps, p.pool);
}

// h holds attn_norm(x); leaves the attention's output projection in h (before any post-norm).
void Model::attention_core(Pass& p, int32_t il) {
  const ModelConfig& c = config_;
  Scratch& b = scratch_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  const bool local = c.is_local(il);
  const int64_t T = p.T;
  if (p.batch.before_layer) p.batch.before_layer(il);
  // Q, K and V share h's quantised rows.
  const kernels::MatmulTask qkv[] = {{&w.wq, b.q.data()}, {&w.wk, b.k.data()}, {&w.wv, b.v.data()}};
  kernels::matmul_many(qkv, b.h.data(), T, p.pool, b.matmul);
  add_bias(b.q.data(), w.bq, T);
  add_bias(b.k.data(), w.bk, T);
  add_bias(b.v.data(), w.bv, T);
  position_and_store(p, il);
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim_k, c.head_dim_v, c.attention_scale,
                                      local ? c.sliding_window : 0, 0.0f};
  if (p.batch.before_attention) p.batch.before_attention(il);
  kernels::paged_attention(p.queries, p.kv, il - p.kv_layer_base, shape, p.pool);
  kernels::matmul(w.wo, b.attn.data(), T, b.h.data(), p.pool, b.matmul);
  add_bias(b.h.data(), w.bo, T);
}

// QK-norm and RoPE of each row's Q and K at its position, then its K and V into its slot of the
// paged pool.
void Model::position_and_store(Pass& p, int32_t il) {
  const ModelConfig& c = config_;
  Scratch& b = scratch_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  const int32_t block_size = p.kv.layout().block_size;
  const kernels::F16Ops& f16 = kernels::f16_ops();
  const bool f32_pool = p.kv.layout().dtype == DType::F32;
  // Writes one head's row into slot `slot` of a [slot][dim] plane of the pool.
  const auto store_kv = [&](const float* src, void* plane, int32_t slot, int32_t dim) {
    if (f32_pool) {
      std::memcpy(static_cast<float*>(plane) + static_cast<int64_t>(slot) * dim, src, static_cast<size_t>(dim) * sizeof(float));
    } else {
      f16.to_f16(src, static_cast<uint16_t*>(plane) + static_cast<int64_t>(slot) * dim, dim);
    }
  };
  const kernels::RopeParams rope =
      rope_params_for_layer(c, il, weights_.rope_freq_factors.empty() ? nullptr : weights_.rope_freq_factors.data());
  const bool uses_rope = c.uses_rope(il);
  p.pool.parallel_for(p.T, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* q = b.q.data() + t * p.q_dim;
      float* k = b.k.data() + t * p.k_dim;
      if (c.has_qk_norm) {
        for (int32_t h = 0; h < c.n_heads; ++h) kernels::rms_norm(q + h * c.head_dim_k, w.q_norm, q + h * c.head_dim_k, c.head_dim_k, c.rms_eps);
        for (int32_t h = 0; h < c.n_kv_heads; ++h) kernels::rms_norm(k + h * c.head_dim_k, w.k_norm, k + h * c.head_dim_k, c.head_dim_k, c.rms_eps);
      }
      const TokenPlace& place = p.places[static_cast<size_t>(t)];
      if (uses_rope) {
        kernels::RopeAngles angles;  // once for Q and K
        kernels::rope_angles(place.position, rope, angles);
        kernels::rope_apply(q, c.n_heads, angles, rope);
        kernels::rope_apply(k, c.n_kv_heads, angles, rope);
      }
      if (c.attention_temperature_scale != 0.0f) {
        const float temperature = query_temperature(c, place.position);
        for (int64_t i = 0; i < p.q_dim; ++i) q[i] *= temperature;
      }
      const auto& table = p.batch.sequences[static_cast<size_t>(place.sequence)].block_table;
      const BlockId block = table[static_cast<size_t>(place.position / block_size)];
      const int32_t slot = place.position % block_size;
      for (int32_t h = 0; h < c.n_kv_heads; ++h) {
        store_kv(k + h * c.head_dim_k, p.kv.keys(block, il - p.kv_layer_base, h), slot, c.head_dim_k);
        store_kv(b.v.data() + t * p.v_dim + h * c.head_dim_v, p.kv.values(block, il - p.kv_layer_base, h), slot, c.head_dim_v);
      }
    }
  });
}

// h holds ffn_norm(x); leaves x += ffn, h = the next layer's attn_norm(x) (none after `layers_end`).
void Model::ffn_block(Pass& p, int32_t il, int32_t layers_end) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  ffn_core(p, il);
  // x += post_ffn_norm(h), and the next layer's attn_norm(x) into h.
  const std::vector<float>* next_norm = il + 1 < layers_end ? &weights_.layers[static_cast<size_t>(il) + 1].attn_norm : nullptr;
  residual_step(scratch_.x.data(), scratch_.h.data(), c.has_post_norms ? &w.post_ffn_norm : nullptr, next_norm,
                c.residual_scale, p.T, c.n_embd, c.rms_eps, p.pool);
}

// h holds ffn_norm(x); leaves the FFN's down projection in h (before any post-norm).
void Model::ffn_core(Pass& p, int32_t il) {
  const ModelConfig& c = config_;
  Scratch& b = scratch_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  const int64_t T = p.T;
  const kernels::MatmulTask gate_up[] = {{&w.w_gate, b.gate.data()}, {&w.w_up, b.up.data()}};
  kernels::matmul_many(gate_up, b.h.data(), T, p.pool, b.matmul);
  add_bias(b.gate.data(), w.b_gate, T);
  add_bias(b.up.data(), w.b_up, T);
  const int64_t n_ff = c.n_ff;
  p.pool.parallel_for(T, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = b.gate.data() + t * n_ff;
      const float* up = b.up.data() + t * n_ff;
      float* act = b.ffn.data() + t * n_ff;
      if (c.activation == FfnActivation::kGeluTanh) {
        kernels::geglu(gate, up, act, n_ff);
      } else {
        kernels::swiglu(gate, up, act, n_ff);
      }
    }
  });
  kernels::matmul(w.w_down, b.ffn.data(), T, b.h.data(), p.pool, b.matmul);
  add_bias(b.h.data(), w.b_down, T);
}

namespace {

// Per logits row, the mask of an argmax-only row that has one (null for the rest); empty when
// no row has one.
std::span<const uint64_t* const> row_masks(const Batch& batch, const ForwardOutput& out, std::vector<const uint64_t*>& masks) {
  masks.clear();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const std::span<const uint64_t> allowed = batch.sequences[s].allowed_tokens;
    if (allowed.empty()) continue;
    masks.resize(static_cast<size_t>(out.first_row.back() + out.row_count.back()), nullptr);
    masks[static_cast<size_t>(out.first_row[s])] = allowed.data();
  }
  return masks;
}

}  // namespace

// The final-normed hidden states of the kHidden sequences' tokens (what the output product
// would read).
void Model::compute_hidden(Pass& p, ForwardOutput& out) {
  const Batch& batch = p.batch;
  const int64_t n_embd = config_.n_embd;
  out.n_embd = config_.n_embd;
  out.hidden_first.assign(batch.sequences.size(), -1);
  int64_t n_hidden = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    if (batch.sequences[s].logits != LogitsFor::kHidden) continue;
    out.hidden_first[s] = static_cast<int32_t>(n_hidden);
    n_hidden += static_cast<int64_t>(batch.sequences[s].tokens.size());
  }
  out.hidden.resize(static_cast<size_t>(n_hidden * n_embd));
  int64_t t = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const auto n = static_cast<int64_t>(batch.sequences[s].tokens.size());
    for (int64_t i = 0; out.hidden_first[s] >= 0 && i < n; ++i) {
      kernels::rms_norm(scratch_.x.data() + (t + i) * n_embd, weights_.output_norm,
                        out.hidden.data() + (out.hidden_first[s] + i) * n_embd, n_embd, config_.rms_eps);
    }
    t += n;
  }
}

// Logits only for the rows that want them.
void Model::compute_logits(Pass& p, ForwardOutput& out) {
  const ModelConfig& c = config_;
  const Batch& batch = p.batch;
  Scratch& b = scratch_;
  const int64_t n_embd = c.n_embd;
  std::vector<int64_t> wanted;
  std::vector<uint8_t>& argmax_only = b.argmax_only;
  argmax_only.clear();
  out.first_row.assign(batch.sequences.size(), 0);
  out.row_count.assign(batch.sequences.size(), 0);
  out.argmax.assign(batch.sequences.size(), -1);
  int64_t t = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceInput& seq = batch.sequences[s];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    out.first_row[s] = static_cast<int32_t>(wanted.size());
    if (seq.logits == LogitsFor::kAll || seq.logits == LogitsFor::kArgmaxAll) {
      for (int64_t i = 0; i < n; ++i) wanted.push_back(t + i);
    } else if (seq.logits == LogitsFor::kLast || seq.logits == LogitsFor::kArgmax) {
      wanted.push_back(t + n - 1);
    }
    argmax_only.resize(wanted.size(), seq.logits == LogitsFor::kArgmax || seq.logits == LogitsFor::kArgmaxAll ? 1 : 0);
    out.row_count[s] = static_cast<int32_t>(wanted.size()) - out.first_row[s];
    t += n;
  }
  const int64_t n_out = static_cast<int64_t>(wanted.size());
  resize(b.logits_in, n_out * n_embd);
  for (int64_t r = 0; r < n_out; ++r) {
    kernels::rms_norm(b.x.data() + wanted[static_cast<size_t>(r)] * n_embd, weights_.output_norm,
                      b.logits_in.data() + r * n_embd, n_embd, c.rms_eps);
  }
  out.n_vocab = n_vocab();
  out.logits.resize(static_cast<size_t>(n_out) * static_cast<size_t>(out.n_vocab));
  out.row_argmax.assign(static_cast<size_t>(n_out), -1);
  if (n_out == 0) return;
  // The product folds the argmax-only rows itself unless a softcap or a logit scale comes between
  // (both are monotonic, but rounding can make two logits equal after them).
  const bool any_argmax = std::find(argmax_only.begin(), argmax_only.end(), 1) != argmax_only.end();
  const bool logits_transformed = c.final_logit_softcap > 0.0f || c.logit_scale != 1.0f;
  kernels::ArgmaxRows& argmax = b.argmax;
  argmax.folded = false;
  if (any_argmax && !logits_transformed) {
    argmax.wanted = argmax_only;
    argmax.masks = row_masks(batch, out, b.argmax_masks);
    kernels::matmul(weights_.output, b.logits_in.data(), n_out, out.logits.data(), p.pool, b.matmul, argmax);
  } else {
    kernels::matmul(weights_.output, b.logits_in.data(), n_out, out.logits.data(), p.pool, b.matmul);
  }
  if (c.logit_scale != 1.0f) {
    const float inverse = 1.0f / c.logit_scale;  // ggml_scale by 1 / logit_scale, as llama.cpp
    for (float& logit : out.logits) logit *= inverse;
  }
  if (c.final_logit_softcap > 0.0f) {
    kernels::softcap(out.logits.data(), static_cast<int64_t>(out.logits.size()), c.final_logit_softcap);
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const LogitsFor wants = batch.sequences[s].logits;
    if (wants != LogitsFor::kArgmax && wants != LogitsFor::kArgmaxAll) continue;
    const std::span<const uint64_t> allowed = batch.sequences[s].allowed_tokens;
    for (int32_t i = 0; i < out.row_count[s]; ++i) {
      const int64_t row = out.first_row[s] + i;
      out.row_argmax[static_cast<size_t>(row)] = argmax.folded        ? kernels::argmax_of_lanes(argmax, row, n_out)
                                                 : !allowed.empty() ? kernels::argmax_allowed(out.row(s, i), out.n_vocab, allowed.data())
                                                                    : kernels::argmax(out.row(s, i), out.n_vocab);
    }
    out.argmax[s] = out.row_argmax[static_cast<size_t>(out.first_row[s] + out.row_count[s] - 1)];
  }
}

}  // namespace mnemo
