#include "support/reference_forward.h"

#include <algorithm>
#include <cmath>

#include "kernels/nn/ops.h"
#include "model/rope_setup.h"
#include "util/fp16.h"

namespace mnemo::testing {
namespace {

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

std::vector<float> product(const kernels::WeightMatrix& w, const std::vector<float>& x, int64_t rows, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(rows * w.out_features));
  kernels::MatmulScratch scratch;
  kernels::matmul(w, x.data(), rows, y.data(), pool, scratch);
  return y;
}

void norm_rows(std::vector<float>& x, const std::vector<float>& weight, int64_t n, float eps) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    kernels::rms_norm(x.data() + r * static_cast<size_t>(n), weight, x.data() + r * static_cast<size_t>(n), n, eps);
  }
}

}  // namespace

std::vector<float> reference_forward(const Model& model, std::span<const TokenId> tokens, DType kv_dtype,
                                     ThreadPool& pool) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t E = c.n_embd;
  const int64_t dk = c.head_dim_k;
  const int64_t dv = c.head_dim_v;
  const int32_t group = c.n_heads / c.n_kv_heads;

  std::vector<float> x(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; ++t) {
    kernels::dequantize_row(w.token_embedding, tokens[static_cast<size_t>(t)], x.data() + t * E);
    for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(t * E + i)] *= c.embedding_scale;
  }

  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& l = w.layers[static_cast<size_t>(il)];
    std::vector<float> h = x;
    norm_rows(h, l.attn_norm, E, c.rms_eps);
    std::vector<float> q = product(l.wq, h, T, pool);
    std::vector<float> k = product(l.wk, h, T, pool);
    std::vector<float> v = product(l.wv, h, T, pool);
    const auto bias = [](std::vector<float>& m, const std::vector<float>& b) {
      for (size_t i = 0; i < m.size() && !b.empty(); ++i) m[i] += b[i % b.size()];
    };
    bias(q, l.bq);
    bias(k, l.bk);
    bias(v, l.bv);
    if (c.has_qk_norm) {
      norm_rows(q, l.q_norm, dk, c.rms_eps);
      norm_rows(k, l.k_norm, dk, c.rms_eps);
    }
    const bool local = c.is_local(il);
    const kernels::RopeParams rope =
        rope_params_for_layer(c, il, w.rope_freq_factors.empty() ? nullptr : w.rope_freq_factors.data());
    for (int64_t t = 0; t < T && c.uses_rope(il); ++t) {
      kernels::rope(q.data() + t * c.n_heads * dk, c.n_heads, static_cast<int32_t>(t), rope);
      kernels::rope(k.data() + t * c.n_kv_heads * dk, c.n_kv_heads, static_cast<int32_t>(t), rope);
    }
    if (c.attention_temperature_scale != 0.0f) {
      for (int64_t t = 0; t < T; ++t) {
        const double steps = std::floor(static_cast<double>(t) / c.attention_temperature_length);
        const auto temperature = static_cast<float>(std::log(steps + 1.0) * c.attention_temperature_scale + 1.0);
        for (int64_t i = 0; i < c.n_heads * dk; ++i) q[static_cast<size_t>(t * c.n_heads * dk + i)] *= temperature;
      }
    }
    if (kv_dtype == DType::F16) {
      for (float& e : q) e = round_f16(e);
      for (float& e : k) e = round_f16(e);
      for (float& e : v) e = round_f16(e);
    }

    std::vector<float> attn(static_cast<size_t>(T * c.n_heads * dv), 0.0f);
    std::vector<float> scores(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t lo = local && c.sliding_window > 0 ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
      for (int32_t head = 0; head < c.n_heads; ++head) {
        const int32_t kv_head = head / group;
        const float* qh = q.data() + (t * c.n_heads + head) * dk;
        float max_score = -INFINITY;
        for (int64_t j = lo; j <= t; ++j) {
          const float* kj = k.data() + (j * c.n_kv_heads + kv_head) * dk;
          float s = 0.0f;
          for (int64_t d = 0; d < dk; ++d) s += qh[d] * kj[d];
          scores[static_cast<size_t>(j)] = s * c.attention_scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
        }
        float sum = 0.0f;
        for (int64_t j = lo; j <= t; ++j) {
          scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - max_score);
          sum += scores[static_cast<size_t>(j)];
        }
        float* out = attn.data() + (t * c.n_heads + head) * dv;
        for (int64_t j = lo; j <= t; ++j) {
          const float* vj = v.data() + (j * c.n_kv_heads + kv_head) * dv;
          const float p = scores[static_cast<size_t>(j)] / sum;
          for (int64_t d = 0; d < dv; ++d) out[d] += p * vj[d];
        }
      }
    }
    std::vector<float> o = product(l.wo, attn, T, pool);
    bias(o, l.bo);
    if (c.has_post_norms) norm_rows(o, l.post_attn_norm, E, c.rms_eps);
    for (size_t i = 0; i < x.size(); ++i) x[i] += c.residual_scale == 1.0f ? o[i] : o[i] * c.residual_scale;

    h = x;
    norm_rows(h, l.ffn_norm, E, c.rms_eps);
    std::vector<float> gate = product(l.w_gate, h, T, pool);
    std::vector<float> up = product(l.w_up, h, T, pool);
    bias(gate, l.b_gate);
    bias(up, l.b_up);
    std::vector<float> act(gate.size());
    if (c.activation == FfnActivation::kGeluTanh) {
      kernels::geglu(gate.data(), up.data(), act.data(), static_cast<int64_t>(act.size()));
    } else {
      kernels::swiglu(gate.data(), up.data(), act.data(), static_cast<int64_t>(act.size()));
    }
    std::vector<float> down = product(l.w_down, act, T, pool);
    bias(down, l.b_down);
    if (c.has_post_norms) norm_rows(down, l.post_ffn_norm, E, c.rms_eps);
    for (size_t i = 0; i < x.size(); ++i) x[i] += c.residual_scale == 1.0f ? down[i] : down[i] * c.residual_scale;
  }
  norm_rows(x, w.output_norm, E, c.rms_eps);
  std::vector<float> logits = product(w.output, x, T, pool);
  if (c.logit_scale != 1.0f) {
    for (float& logit : logits) logit *= 1.0f / c.logit_scale;
  }
  if (c.final_logit_softcap > 0.0f) kernels::softcap(logits.data(), static_cast<int64_t>(logits.size()), c.final_logit_softcap);
  return logits;
}

}  // namespace mnemo::testing
