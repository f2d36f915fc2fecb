#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/type_kernels.h"

namespace mnemo {
namespace {

class Loader {
 public:
  Loader(const gguf::File& file, const ModelConfig& config) : file_(file), config_(config) {}

  // A weight matrix [out rows of in elements] of a type with kernels.
  Result<WeightMatrix> matrix(const std::string& name, int64_t in, int64_t out) const {
    MNEMO_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
    MNEMO_RETURN_IF_ERROR(check_shape(*t, {in, out}));
    const kernels::TypeKernels* k = kernels::type_kernels(t->type);
    if (k == nullptr || k->vec_dot == nullptr) {
      return make_error("{}: tensor '{}' has type {}, which has no matrix kernels", file_.name(), name,
                        dtype_name(t->type));
    }
    return WeightMatrix{t->type, in, out, t->data};
  }

  Result<Vector> vector(const std::string& name, int64_t n) const {
    MNEMO_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
    MNEMO_RETURN_IF_ERROR(check_shape(*t, {n}));
    const kernels::TypeKernels* k = kernels::type_kernels(t->type);
    if (k == nullptr) return make_error("{}: tensor '{}' has unsupported type {}", file_.name(), name, dtype_name(t->type));
    Vector out(static_cast<size_t>(n));
    k->to_float(t->data, out.data(), n);
    return out;
  }

  Result<Vector> optional_vector(const std::string& name, int64_t n, bool wanted) const {
    if (!wanted) return Vector{};
    return vector(name, n);
  }

  // A tensor any architecture may carry (biases): loaded when the file has it, else empty.
  Result<Vector> vector_if_present(const std::string& name, int64_t n) const { return optional_vector(name, n, has(name)); }

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

 private:
  Result<const gguf::TensorInfo*> find(const std::string& name) const {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) return make_error("{}: missing tensor '{}' for architecture {}", file_.name(), name, config_.arch_name);
    return t;
  }

  Status check_shape(const gguf::TensorInfo& t, std::vector<int64_t> expected) const {
    if (t.dims != expected) {
      return make_error("{}: tensor '{}' has shape [{}], expected [{}]", file_.name(), t.name,
                        fmt::join(t.dims, ", "), fmt::join(expected, ", "));
    }
    return ok_status();
  }

  const gguf::File& file_;
  const ModelConfig& config_;
};

// Rows [begin, end) of m: a view into the same bytes.
WeightMatrix rows_of(const WeightMatrix& m, int64_t begin, int64_t end) {
  return WeightMatrix{m.type, m.in_features, end - begin, m.data + static_cast<size_t>(begin) * m.row_bytes()};
}

Vector slice_of(const Vector& v, int64_t begin, int64_t end) {
  return Vector(v.begin() + begin, v.begin() + end);
}

// Q, K and V with their biases: three tensors, or Phi-3's attn_qkv whose rows (and bias) are Q's,
// then K's, then V's.
Status load_attention_inputs(const Loader& load, const std::string& p, int64_t n_embd, int64_t q_dim, int64_t k_dim,
                             int64_t v_dim, LayerWeights& l) {
  if (load.has(p + "attn_qkv.weight")) {
    MNEMO_ASSIGN_OR_RETURN(const WeightMatrix fused, load.matrix(p + "attn_qkv.weight", n_embd, q_dim + k_dim + v_dim));
    l.wq = rows_of(fused, 0, q_dim);
    l.wk = rows_of(fused, q_dim, q_dim + k_dim);
    l.wv = rows_of(fused, q_dim + k_dim, q_dim + k_dim + v_dim);
    if (load.has(p + "attn_qkv.bias")) {
      MNEMO_ASSIGN_OR_RETURN(const Vector bias, load.vector(p + "attn_qkv.bias", q_dim + k_dim + v_dim));
      l.bq = slice_of(bias, 0, q_dim);
      l.bk = slice_of(bias, q_dim, q_dim + k_dim);
      l.bv = slice_of(bias, q_dim + k_dim, q_dim + k_dim + v_dim);
      return ok_status();
    }
  } else {
    MNEMO_ASSIGN_OR_RETURN(l.wq, load.matrix(p + "attn_q.weight", n_embd, q_dim));
    MNEMO_ASSIGN_OR_RETURN(l.wk, load.matrix(p + "attn_k.weight", n_embd, k_dim));
    MNEMO_ASSIGN_OR_RETURN(l.wv, load.matrix(p + "attn_v.weight", n_embd, v_dim));
  }
  MNEMO_ASSIGN_OR_RETURN(l.bq, load.vector_if_present(p + "attn_q.bias", q_dim));
  MNEMO_ASSIGN_OR_RETURN(l.bk, load.vector_if_present(p + "attn_k.bias", k_dim));
  MNEMO_ASSIGN_OR_RETURN(l.bv, load.vector_if_present(p + "attn_v.bias", v_dim));
  return ok_status();
}

// Gate and up: two tensors, or Phi-3's ffn_up of twice the rows, the gate's first.
Status load_ffn(const Loader& load, const std::string& p, int64_t n_embd, int64_t n_ff, LayerWeights& l) {
  if (load.has(p + "ffn_gate.weight")) {
    MNEMO_ASSIGN_OR_RETURN(l.w_gate, load.matrix(p + "ffn_gate.weight", n_embd, n_ff));
    MNEMO_ASSIGN_OR_RETURN(l.w_up, load.matrix(p + "ffn_up.weight", n_embd, n_ff));
    MNEMO_ASSIGN_OR_RETURN(l.b_gate, load.vector_if_present(p + "ffn_gate.bias", n_ff));
    MNEMO_ASSIGN_OR_RETURN(l.b_up, load.vector_if_present(p + "ffn_up.bias", n_ff));
  } else {
    MNEMO_ASSIGN_OR_RETURN(const WeightMatrix fused, load.matrix(p + "ffn_up.weight", n_embd, 2 * n_ff));
    l.w_gate = rows_of(fused, 0, n_ff);
    l.w_up = rows_of(fused, n_ff, 2 * n_ff);
  }
  MNEMO_ASSIGN_OR_RETURN(l.w_down, load.matrix(p + "ffn_down.weight", n_ff, n_embd));
  MNEMO_ASSIGN_OR_RETURN(l.b_down, load.vector_if_present(p + "ffn_down.bias", n_embd));
  return ok_status();
}

// See LoadOptions::prepack_budget_bytes. The output projection comes first: every sequence of
// every step multiplies it, and its Q8_0 tiles replace the file's rows (whose pages are given
// back), so it costs almost nothing beyond the mapping.
void prepack_within_budget(const gguf::File& file, ModelWeights& w, const LoadOptions& options, int32_t layer_end) {
  const size_t budget = options.prepack_budget_bytes;
  const auto prepack = [&](WeightMatrix& m) {
    const size_t bytes = kernels::prepacked_bytes(m);
    if (bytes == 0 || m.tiles != nullptr) return;
    const bool replaces_rows = kernels::prepacked_tiles_replace_rows(m);
    const size_t file_bytes = m.row_bytes() * static_cast<size_t>(m.out_features);
    const size_t extra = replaces_rows ? bytes - std::min(bytes, file_bytes) : bytes;
    if (w.prepacked_extra_bytes + extra > budget) return;
    w.packed_tiles.push_back(kernels::prepack(m));
    w.prepacked_extra_bytes += extra;
    // When tied, the embedding lookup still reads a row of the file's copy per token; its pages
    // come back from the file as it does.
    if (replaces_rows) file.release_pages(m.data, file_bytes);
  };
  if (options.head) prepack(w.output);
  for (int32_t il = options.layer_begin; il < layer_end; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) prepack(*m);
  }
}

}  // namespace

Result<ModelWeights> load_weights(const gguf::File& file, const ModelConfig& c, const LoadOptions& options) {
  const Loader load(file, c);
  ModelWeights w;
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return make_error("{}: missing or malformed tensor 'token_embd.weight'", file.name());
  }
  const int64_t n_vocab = embd->dims[1];
  if (c.n_vocab != 0 && c.n_vocab != n_vocab) {
    return make_error("{}: token_embd.weight has {} rows but the vocabulary has {} tokens", file.name(), n_vocab, c.n_vocab);
  }
  MNEMO_ASSIGN_OR_RETURN(w.token_embedding, load.matrix("token_embd.weight", c.n_embd, n_vocab));
  MNEMO_ASSIGN_OR_RETURN(w.output_norm, load.vector("output_norm.weight", c.n_embd));
  if (load.has("output.weight")) {
    MNEMO_ASSIGN_OR_RETURN(w.output, load.matrix("output.weight", c.n_embd, n_vocab));
  } else {
    w.output = w.token_embedding;
  }
  if (load.has("rope_freqs.weight")) {
    MNEMO_ASSIGN_OR_RETURN(w.rope_freq_factors, load.vector("rope_freqs.weight", c.rope_dims / 2));
  } else {
    const std::string factors = c.context_length > c.rope_scaling.original_context ? "rope_factors_long.weight"
                                                                                   : "rope_factors_short.weight";
    MNEMO_ASSIGN_OR_RETURN(w.rope_freq_factors, load.vector_if_present(factors, c.rope_dims / 2));
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim_k;
  const int64_t k_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim_k;
  const int64_t v_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim_v;
  const int64_t o_dim = static_cast<int64_t>(c.n_heads) * c.head_dim_v;
  const int32_t layer_end = options.layer_end < 0 ? c.n_layers : options.layer_end;
  if (options.layer_begin < 0 || options.layer_begin > layer_end || layer_end > c.n_layers) {
    return make_error("{}: layers [{}, {}) are not within the model's {}", file.name(), options.layer_begin, layer_end,
                      c.n_layers);
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int32_t il = options.layer_begin; il < layer_end; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    const std::string p = fmt::format("blk.{}.", il);
    MNEMO_ASSIGN_OR_RETURN(l.attn_norm, load.vector(p + "attn_norm.weight", c.n_embd));
    MNEMO_RETURN_IF_ERROR(load_attention_inputs(load, p, c.n_embd, q_dim, k_dim, v_dim, l));
    MNEMO_ASSIGN_OR_RETURN(l.wo, load.matrix(p + "attn_output.weight", o_dim, c.n_embd));
    MNEMO_ASSIGN_OR_RETURN(l.bo, load.vector_if_present(p + "attn_output.bias", c.n_embd));
    MNEMO_ASSIGN_OR_RETURN(l.q_norm, load.optional_vector(p + "attn_q_norm.weight", c.head_dim_k, c.has_qk_norm));
    MNEMO_ASSIGN_OR_RETURN(l.k_norm, load.optional_vector(p + "attn_k_norm.weight", c.head_dim_k, c.has_qk_norm));
    MNEMO_ASSIGN_OR_RETURN(l.post_attn_norm,
                           load.optional_vector(p + "post_attention_norm.weight", c.n_embd, c.has_post_norms));
    MNEMO_ASSIGN_OR_RETURN(l.ffn_norm, load.vector(p + "ffn_norm.weight", c.n_embd));
    MNEMO_RETURN_IF_ERROR(load_ffn(load, p, c.n_embd, c.n_ff, l));
    MNEMO_ASSIGN_OR_RETURN(l.post_ffn_norm,
                           load.optional_vector(p + "post_ffw_norm.weight", c.n_embd, c.has_post_norms));
  }
  for (int32_t il = 0; options.layer_norms && il < c.n_layers; ++il) {
    if (il >= options.layer_begin && il < layer_end) continue;
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    const std::string p = fmt::format("blk.{}.", il);
    MNEMO_ASSIGN_OR_RETURN(l.attn_norm, load.vector(p + "attn_norm.weight", c.n_embd));
    MNEMO_ASSIGN_OR_RETURN(l.ffn_norm, load.vector(p + "ffn_norm.weight", c.n_embd));
    MNEMO_ASSIGN_OR_RETURN(l.post_attn_norm,
                           load.optional_vector(p + "post_attention_norm.weight", c.n_embd, c.has_post_norms));
    MNEMO_ASSIGN_OR_RETURN(l.post_ffn_norm, load.optional_vector(p + "post_ffw_norm.weight", c.n_embd, c.has_post_norms));
  }
  w.shard = {0, 1, 0, c.n_heads, 0, c.n_kv_heads, 0, c.n_ff};
  if (options.tensor_ranks > 1) {
    int32_t ff_unit = 1;  // the largest block of any down projection held: every slice whole blocks
    for (int32_t il = options.layer_begin; il < layer_end; ++il) {
      ff_unit = std::max(ff_unit, static_cast<int32_t>(dtype_info(w.layers[static_cast<size_t>(il)].w_down.type).block_elems));
    }
    MNEMO_ASSIGN_OR_RETURN(w.shard, tensor_shard(c, options.tensor_rank, options.tensor_ranks, ff_unit));
    if (Status sliced = slice_for_shard(c, w.shard, options.layer_begin, layer_end, w); !sliced.ok()) {
      return sliced.error().with_context(file.name());
    }
  }
  prepack_within_budget(file, w, options, layer_end);
  return w;
}

}  // namespace mnemo
