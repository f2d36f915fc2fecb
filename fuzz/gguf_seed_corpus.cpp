// Writes small valid GGUF files as fuzzing seeds: gguf_seed_corpus <dir>.
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"

namespace {

using mnemo::DType;
using mnemo::gguf::Array;
using mnemo::gguf::Value;
using mnemo::gguf::ValueType;
using mnemo::gguf::Writer;

std::vector<uint8_t> bytes_of(size_t n) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i);
  return data;
}

bool save(const Writer& writer, const std::string& dir, const std::string& name) {
  const auto status = writer.write(dir + "/" + name);
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.error().message().c_str());
  return status.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = save(Writer(), dir, "empty.gguf");

  Writer metadata;
  metadata.set_string("general.architecture", "gemma3");
  metadata.set_u32("gemma3.block_count", 2);
  metadata.set_f32("gemma3.rope.freq_base", 10000.0f);
  metadata.set_bool("tokenizer.ggml.add_bos_token", true);
  metadata.set("u8", Value{uint8_t{1}});
  metadata.set("i16", Value{int16_t{-2}});
  metadata.set("u64", Value{uint64_t{3}});
  metadata.set("f64", Value{0.5});
  metadata.set_string_array("tokenizer.ggml.tokens", {"<pad>", "a", "", "bc"});
  metadata.set_f32_array("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f, -3.0f});
  metadata.set_i32_array("tokenizer.ggml.token_type", {3, 1, 1, 1});
  metadata.set("nested", Value{Array{ValueType::kArray, {Value{Array{ValueType::kUint16, {Value{uint16_t{7}}}}}}}});
  ok = save(metadata, dir, "metadata.gguf") && ok;

  Writer tensors;
  tensors.set_string("general.architecture", "test");
  ok = tensors.add_tensor("f32", DType::F32, {4, 2}, bytes_of(32)).ok() && ok;
  ok = tensors.add_tensor("f16", DType::F16, {3}, bytes_of(6)).ok() && ok;
  ok = tensors.add_tensor("q8_0", DType::Q8_0, {32, 2}, bytes_of(68)).ok() && ok;
  ok = tensors.add_tensor("q4_k", DType::Q4_K, {256}, bytes_of(144)).ok() && ok;
  ok = save(tensors, dir, "tensors.gguf") && ok;

  Writer aligned(64);
  ok = aligned.add_tensor("w", DType::I8, {3, 1, 1, 2}, bytes_of(6)).ok() && ok;
  ok = aligned.add_tensor("b", DType::F32, {1}, bytes_of(4)).ok() && ok;
  ok = save(aligned, dir, "aligned64.gguf") && ok;
  return ok ? 0 : 1;
}
