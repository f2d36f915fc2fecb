// Standard base64 with '=' padding, the encoding proto3 JSON uses for bytes fields. Decoding is
// strict about the alphabet, the length and where padding may stand; like Go's StdEncoding it
// ignores the unused low bits of the last symbol.
#include <array>
#include <cstdint>

#include "cluster/etcd_client.h"
#include "cluster/etcd_wire.h"

namespace mnemo::cluster {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kNotBase64 = -1;

constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  table.fill(kNotBase64);
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecodeTable = make_decode_table();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                           static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                           static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += kAlphabet[group >> 6 & 63];
    out += kAlphabet[group & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) group |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += rest == 2 ? kAlphabet[group >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return make_error("base64: length {} is not a multiple of 4", text.size());
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t group = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool is_padding = i >= text.size() - padding;
    const int8_t sextet = is_padding ? 0 : kDecodeTable[static_cast<unsigned char>(text[i])];
    if (sextet == kNotBase64) {
      return make_error("base64: invalid byte '{}' at offset {}", wire::printable(text.substr(i, 1)), i);
    }
    group = group << 6 | static_cast<uint32_t>(sextet);
    if (i % 4 == 3) {
      out += static_cast<char>(group >> 16 & 0xff);
      out += static_cast<char>(group >> 8 & 0xff);
      out += static_cast<char>(group & 0xff);
      group = 0;
    }
  }
  out.resize(out.size() - padding);
  return out;
}

}  // namespace mnemo::cluster
