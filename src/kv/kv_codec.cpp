#include "kv/kv_codec.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kv_quant.h"

namespace mnemo {
namespace {

constexpr std::pair<KvType, std::string_view> kNames[] = {
    {KvType::kF16, "f16"}, {KvType::kF32, "f32"}, {KvType::kQ8_0, "q8_0"}, {KvType::kQ4_0, "q4_0"}, {KvType::kKivi4, "kivi4"},
    {KvType::kK4V8, "k4v8"}};

// A layer's elements in F16, for the types that quantise from it (thread-local: the background
// copier converts beside the engine thread).
std::vector<uint16_t>& f16_scratch(size_t elems) {
  thread_local std::vector<uint16_t> scratch;
  if (scratch.size() < elems) scratch.resize(elems);
  return scratch;
}

}  // namespace

std::string_view kv_type_name(KvType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

bool kv_type_exact(KvType type, DType device) {
  return type == KvType::kF32 || (type == KvType::kF16 && device == DType::F16);
}

Result<KvTypes> parse_kv_types(std::string_view spec) {
  const auto type_of = [](std::string_view name) -> Result<KvType> {
    const auto type = parse_kv_type(name);
    if (!type) return make_error("unknown KV element type '{}' (f16, f32, q8_0, q4_0, kivi4, k4v8)", name);
    return *type;
  };
  KvTypes types;
  if (spec.find('=') == std::string_view::npos) {
    MNEMO_ASSIGN_OR_RETURN(const KvType all, type_of(spec));
    if (all != KvType::kF16 && all != KvType::kF32) {
      return make_error("--kv-types {}: the device holds f16 or f32; name the colder tiers (host={},disk={})", spec, spec, spec);
    }
    return KvTypes{all, all, all};
  }
  bool host_named = false, disk_named = false;
  for (size_t begin = 0; begin <= spec.size();) {
    const size_t comma = std::min(spec.find(',', begin), spec.size());
    const std::string_view part = spec.substr(begin, comma - begin);
    begin = comma + 1;
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) return make_error("--kv-types: '{}' is not tier=type", part);
    const std::string_view tier = part.substr(0, eq);
    MNEMO_ASSIGN_OR_RETURN(const KvType type, type_of(part.substr(eq + 1)));
    if (tier == "device") {
      if (type != KvType::kF16 && type != KvType::kF32) return make_error("--kv-types: the device holds f16 or f32, not {}", kv_type_name(type));
      types.device = type;
    } else if (tier == "host") {
      types.host = type;
      host_named = true;
    } else if (tier == "disk") {
      types.disk = type;
      disk_named = true;
    } else {
      return make_error("--kv-types: unknown tier '{}' (device, host, disk)", tier);
    }
  }
  if (!host_named) types.host = types.device;
  if (!disk_named) types.disk = types.host;
  return types;
}

std::string kv_types_string(const KvTypes& types) {
  return fmt::format("device={},host={},disk={}", kv_type_name(types.device), kv_type_name(types.host), kv_type_name(types.disk));
}

KvCodec::KvCodec(const KvLayout& layout, KvType type) : layout_(layout), type_(type) {
  device_layer_bytes_ = layout.layer_elems() * layout.element_bytes();
  const size_t v_elems = static_cast<size_t>(layout.n_kv_heads) * layout.v_head_elems();
  switch (type) {
    case KvType::kF16: layer_bytes_ = layout.layer_elems() * 2; break;
    case KvType::kF32: layer_bytes_ = layout.layer_elems() * 4; break;
    case KvType::kQ8_0: layer_bytes_ = layout.layer_elems() / kQK * sizeof(BlockQ8_0); break;
    case KvType::kQ4_0: layer_bytes_ = layout.layer_elems() / kQK * sizeof(BlockQ4_0); break;
    case KvType::kKivi4:
      layer_bytes_ = static_cast<size_t>(layout.n_kv_heads) * kernels::channel_q4_bytes(layout.block_size, layout.head_dim_k) +
                     v_elems / kQK * sizeof(BlockQ4_1);
      break;
    case KvType::kK4V8:
      layer_bytes_ = static_cast<size_t>(layout.n_kv_heads) * kernels::channel_q4_bytes(layout.block_size, layout.head_dim_k) +
                     v_elems / kQK * sizeof(BlockQ8_0);
      break;
  }
  exact_ = kv_type_exact(type, layout.dtype);
  identity_ = (type == KvType::kF16 && layout.dtype == DType::F16) || (type == KvType::kF32 && layout.dtype == DType::F32);
}

KvCodec KvCodec::identity(const KvLayout& layout) {
  return KvCodec(layout, layout.dtype == DType::F32 ? KvType::kF32 : KvType::kF16);
}

Result<KvCodec> KvCodec::make(const KvLayout& layout, KvType type) {
  if (layout.dtype != DType::F16 && layout.dtype != DType::F32) {
    return make_error("KV element type {}: the device's blocks are {}, not f16 or f32", kv_type_name(type), dtype_name(layout.dtype));
  }
  const bool rows_of_32 = layout.head_dim_k % kQK == 0 && layout.head_dim_v % kQK == 0;
  if ((type == KvType::kQ8_0 || type == KvType::kQ4_0) && !rows_of_32) {
    return make_error("KV element type {} needs head dimensions that are multiples of {} (keys {}, values {})", kv_type_name(type), kQK,
                      layout.head_dim_k, layout.head_dim_v);
  }
  if ((type == KvType::kKivi4 || type == KvType::kK4V8) &&
      (layout.head_dim_v % kQK != 0 || layout.head_dim_k % 8 != 0 || layout.block_size % 2 != 0)) {
    return make_error("KV element type {} needs key dimensions a multiple of 8 (got {}), value dimensions a multiple of {} "
                      "(got {}) and an even block size (got {})",
                      kv_type_name(type), layout.head_dim_k, kQK, layout.head_dim_v, layout.block_size);
  }
  return KvCodec(layout, type);
}

void KvCodec::encode_f16_layer(const uint16_t* layer, uint8_t* out) const {
  const kernels::KvQuantKernels& k = kernels::kv_quant_kernels();
  const auto n = static_cast<int64_t>(layout_.layer_elems());
  switch (type_) {
    case KvType::kQ8_0: k.q8_0_encode(layer, reinterpret_cast<BlockQ8_0*>(out), n); return;
    case KvType::kQ4_0: k.q4_0_encode(layer, reinterpret_cast<BlockQ4_0*>(out), n); return;
    case KvType::kKivi4:
    case KvType::kK4V8: {
      const size_t plane = layout_.k_head_elems();
      const size_t plane_bytes = kernels::channel_q4_bytes(layout_.block_size, layout_.head_dim_k);
      for (int32_t h = 0; h < layout_.n_kv_heads; ++h) {
        k.channel_q4_encode(layer + static_cast<size_t>(h) * plane, out + static_cast<size_t>(h) * plane_bytes, layout_.block_size,
                            layout_.head_dim_k);
      }
      const size_t k_elems = static_cast<size_t>(layout_.n_kv_heads) * plane;
      uint8_t* values = out + static_cast<size_t>(layout_.n_kv_heads) * plane_bytes;
      const int64_t v_elems = n - static_cast<int64_t>(k_elems);
      if (type_ == KvType::kKivi4) {
        k.q4_1_encode(layer + k_elems, reinterpret_cast<BlockQ4_1*>(values), v_elems);
      } else {
        k.q8_0_encode(layer + k_elems, reinterpret_cast<BlockQ8_0*>(values), v_elems);
      }
      return;
    }
    case KvType::kF16:
    case KvType::kF32: break;
  }
}

void KvCodec::decode_f16_layer(const uint8_t* in, uint16_t* layer) const {
  const kernels::KvQuantKernels& k = kernels::kv_quant_kernels();
  const auto n = static_cast<int64_t>(layout_.layer_elems());
  switch (type_) {
    case KvType::kQ8_0: k.q8_0_decode(reinterpret_cast<const BlockQ8_0*>(in), layer, n); return;
    case KvType::kQ4_0: k.q4_0_decode(reinterpret_cast<const BlockQ4_0*>(in), layer, n); return;
    case KvType::kKivi4:
    case KvType::kK4V8: {
      const size_t plane = layout_.k_head_elems();
      const size_t plane_bytes = kernels::channel_q4_bytes(layout_.block_size, layout_.head_dim_k);
      for (int32_t h = 0; h < layout_.n_kv_heads; ++h) {
        k.channel_q4_decode(in + static_cast<size_t>(h) * plane_bytes, layer + static_cast<size_t>(h) * plane, layout_.block_size,
                            layout_.head_dim_k);
      }
      const size_t k_elems = static_cast<size_t>(layout_.n_kv_heads) * plane;
      const uint8_t* values = in + static_cast<size_t>(layout_.n_kv_heads) * plane_bytes;
      const int64_t v_elems = n - static_cast<int64_t>(k_elems);
      if (type_ == KvType::kKivi4) {
        k.q4_1_decode(reinterpret_cast<const BlockQ4_1*>(values), layer + k_elems, v_elems);
      } else {
        k.q8_0_decode(reinterpret_cast<const BlockQ8_0*>(values), layer + k_elems, v_elems);
      }
      return;
    }
    case KvType::kF16:
    case KvType::kF32: break;
  }
}

void KvCodec::encode(const uint8_t* layers, uint8_t* out, int32_t n_layers) const {
  if (identity_) {
    std::memcpy(out, layers, static_cast<size_t>(n_layers) * layer_bytes_);
    return;
  }
  const kernels::TypeKernels& f16 = *kernels::type_kernels(DType::F16);
  const auto elems = static_cast<int64_t>(layout_.layer_elems());
  for (int32_t l = 0; l < n_layers; ++l, layers += device_layer_bytes_, out += layer_bytes_) {
    if (layout_.dtype == DType::F16) {
      // Only F32 copies of an F16 device remain here: widened.
      if (type_ == KvType::kF32) {
        f16.to_float(layers, reinterpret_cast<float*>(out), elems);
      } else {
        encode_f16_layer(reinterpret_cast<const uint16_t*>(layers), out);
      }
      continue;
    }
    // An F32 device: narrowed to F16 first (the F16 copy itself, or the quantisers' input).
    uint16_t* narrow = type_ == KvType::kF16 ? reinterpret_cast<uint16_t*>(out) : f16_scratch(static_cast<size_t>(elems)).data();
    f16.from_float(reinterpret_cast<const float*>(layers), narrow, elems);
    if (type_ != KvType::kF16) encode_f16_layer(narrow, out);
  }
}

void KvCodec::decode(const uint8_t* in, uint8_t* layers, int32_t n_layers) const {
  if (identity_) {
    std::memcpy(layers, in, static_cast<size_t>(n_layers) * layer_bytes_);
    return;
  }
  const kernels::TypeKernels& f16 = *kernels::type_kernels(DType::F16);
  const auto elems = static_cast<int64_t>(layout_.layer_elems());
  for (int32_t l = 0; l < n_layers; ++l, layers += device_layer_bytes_, in += layer_bytes_) {
    if (layout_.dtype == DType::F16) {
      if (type_ == KvType::kF32) {
        f16.from_float(reinterpret_cast<const float*>(in), layers, elems);
      } else {
        decode_f16_layer(in, reinterpret_cast<uint16_t*>(layers));
      }
      continue;
    }
    const uint16_t* narrow = reinterpret_cast<const uint16_t*>(in);
    if (type_ != KvType::kF16) {
      uint16_t* scratch = f16_scratch(static_cast<size_t>(elems)).data();
      decode_f16_layer(in, scratch);
      narrow = scratch;
    }
    f16.to_float(narrow, reinterpret_cast<float*>(layers), elems);
  }
}

void convert_layers(const KvCodec& from, const KvCodec& to, const uint8_t* in, uint8_t* out, int32_t n_layers) {
  const size_t n = static_cast<size_t>(n_layers);
  if (from.type() == to.type()) {
    std::memcpy(out, in, n * to.layer_bytes());
  } else if (from.is_identity()) {
    to.encode(in, out, n_layers);
  } else if (to.is_identity()) {
    from.decode(in, out, n_layers);
  } else {
    std::vector<uint8_t> device_form(n * from.device_layer_bytes());
    from.decode(in, device_form.data(), n_layers);
    to.encode(device_form.data(), out, n_layers);
  }
}

}  // namespace mnemo
