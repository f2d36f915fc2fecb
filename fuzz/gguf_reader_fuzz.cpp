// libFuzzer target for the GGUF reader: any input must parse or fail with an Error naming the
// file; a parsed file's metadata and tensor data must be readable without leaving the input.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <span>
#include <string_view>

#include "gguf/gguf_file.h"

namespace {

constexpr std::string_view kName = "fuzz.gguf";

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "gguf_reader_fuzz: %s\n", what);
  std::abort();
}

void use_metadata(const mnemo::gguf::File& file) {
  for (const auto& [key, value] : file.metadata()) {
    if (file.find(key) != &value) fail("find() does not return the parsed entry");
    // Every getter must either succeed or report the key; none may crash on any value type.
    (void)file.get_string(key);
    (void)file.get_int(key);
    (void)file.get_float(key);
    (void)file.get_bool(key);
    (void)file.get_string_array(key);
    (void)file.get_float_array(key);
    (void)file.get_int_array(key);
  }
}

uint32_t use_tensors(const mnemo::gguf::File& file, std::span<const uint8_t> input) {
  uint32_t checksum = 0;
  for (const mnemo::gguf::TensorInfo& tensor : file.tensors()) {
    if (file.find_tensor(tensor.name) != &tensor) fail("find_tensor() does not return the parsed tensor");
    if (tensor.n_bytes == 0) continue;
    if (tensor.data < input.data() || tensor.data + tensor.n_bytes > input.data() + input.size()) {
      fail("tensor data outside the input");
    }
    // Touch both ends: ASan reports a read outside the input buffer.
    checksum += tensor.data[0] + tensor.data[tensor.n_bytes - 1];
  }
  return checksum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto file = mnemo::gguf::File::parse(input, std::string(kName));
  if (!file.ok()) {
    if (file.error().message().rfind(kName, 0) != 0) fail("error message does not start with the file name");
    return 0;
  }
  use_metadata(*file);
  volatile uint32_t sink = use_tensors(*file, input);
  (void)sink;
  return 0;
}
