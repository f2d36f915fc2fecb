// The element type of each tier of the KV pool (`--kv-types device=f16,host=k4v8,disk=k4v8`):
// the device holds what attention reads (F16, or F32 for exact comparisons); colder tiers may
// hold a compressed copy, converted when a chunk is demoted and again when it comes back, so the
// same bytes of host memory and disk hold more chunks. A compressed copy comes back within the
// model's noise band, not identical (docs/kv.md says which types pass and by how much).
//
// A KvCodec converts whole layers of a block (kv/kv_layout.h: a layer's keys then values, each
// head a [slot][dim] plane), contiguous in both forms, so that a layer can be brought back while
// the forward pass runs the one before (SPEC P8) and a sliding-window model's global layers can
// be kept alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/kv_layout.h"
#include "util/result.h"

namespace mnemo {

enum class KvType : uint8_t {
  kF16,
  kF32,
  kQ8_0,   // 32 elements of a row, one F16 scale, 8-bit: 0.53 of F16
  kQ4_0,   // 32 elements of a row, one F16 scale, 4-bit: 0.28 of F16
  kKivi4,  // KIVI-style 4-bit: keys per channel over a block's slots, values per token (groups of 32): 0.34 of F16
  kK4V8,   // KIVI's 4-bit keys per channel, values Q8_0 (values carry straight into the output): 0.42 of F16 at 32-token chunks
};

std::string_view kv_type_name(KvType type);
std::optional<KvType> parse_kv_type(std::string_view name);
// Whether a copy of this type gives the device's values back unchanged.
bool kv_type_exact(KvType type, DType device);

// The element type of each tier; the device's is the layout's dtype.
struct KvTypes {
  KvType device = KvType::kF16;
  KvType host = KvType::kF16;
  KvType disk = KvType::kF16;
};

// "f16" (every tier), or tier=type pairs separated by commas ("device=f16,host=q8_0,disk=q8_0");
// tiers not named hold what the tier above them holds. The device holds f16 or f32 only.
Result<KvTypes> parse_kv_types(std::string_view spec);
std::string kv_types_string(const KvTypes& types);

class KvCodec {
 public:
  // Copies of `layout`'s blocks (its dtype F16 or F32) held as `type`. An error when the
  // geometry does not fit the type (rows of 32 for the 32-element formats, an even block size for
  // KIVI's keys).
  static Result<KvCodec> make(const KvLayout& layout, KvType type);
  // The identity: copies held as the layout's own type.
  static KvCodec identity(const KvLayout& layout);

  KvType type() const { return type_; }
  bool exact() const { return exact_; }
  size_t layer_bytes() const { return layer_bytes_; }
  size_t block_bytes() const { return layer_bytes_ * static_cast<size_t>(layout_.n_layers); }
  // The same bytes as a block of the layout (the device's form).
  bool is_identity() const { return identity_; }

  // `n_layers` whole layers in the device's form (layer_elems() x element_bytes() each) to as
  // many in this type (layer_bytes() each), and back.
  void encode(const uint8_t* layers, uint8_t* out, int32_t n_layers) const;
  void decode(const uint8_t* in, uint8_t* layers, int32_t n_layers) const;
  size_t device_layer_bytes() const { return device_layer_bytes_; }

 private:
  KvCodec(const KvLayout& layout, KvType type);
  void encode_f16_layer(const uint16_t* layer, uint8_t* out) const;
  void decode_f16_layer(const uint8_t* in, uint16_t* layer) const;

  KvLayout layout_;
  KvType type_;
  bool exact_ = true;
  bool identity_ = true;
  size_t layer_bytes_ = 0;
  size_t device_layer_bytes_ = 0;
};

// `n_layers` layers held as `from` to as many held as `to` (two codecs of one layout), through
// the device's form when neither is it.
void convert_layers(const KvCodec& from, const KvCodec& to, const uint8_t* in, uint8_t* out, int32_t n_layers);

}  // namespace mnemo
