// Where a request's sampling defaults come from: serve's flags, else the model file's
// general.sampling.* keys, else llama-server's defaults; bad keys refused.
#include <gtest/gtest.h>

#include <functional>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "server/sampling_defaults.h"

namespace mnemo::server {
namespace {

struct Synthetic {
  std::vector<uint8_t> bytes;
  gguf::File file;
};

Synthetic model_with(const std::function<void(gguf::Writer&)>& keys) {
  gguf::Writer writer;
  writer.set_string("general.architecture", "llama");
  keys(writer);
  std::vector<uint8_t> bytes = writer.to_bytes();
  auto file = gguf::File::parse(bytes, "synthetic.gguf");
  EXPECT_TRUE(file.ok()) << file.error().message();
  return Synthetic{std::move(bytes), std::move(file).value()};
}

TEST(SamplingDefaults, LlamaServersWhenTheModelSaysNothing) {
  const Synthetic m = model_with([](gguf::Writer&) {});
  const auto d = sampling_defaults_for(m.file, {});
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_FLOAT_EQ(d->temperature, 0.8f);
  EXPECT_EQ(d->top_k, 40);
  EXPECT_FLOAT_EQ(d->top_p, 0.95f);
  EXPECT_FLOAT_EQ(d->min_p, 0.05f);
}

TEST(SamplingDefaults, TheModelsKeysThenTheFlagsWin) {
  const Synthetic m = model_with([](gguf::Writer& w) {
    w.set_f32("general.sampling.temp", 0.6f);
    w.set_i32("general.sampling.top_k", 20);
    w.set_f32("general.sampling.top_p", 0.9f);
  });
  auto d = sampling_defaults_for(m.file, {});
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_FLOAT_EQ(d->temperature, 0.6f);
  EXPECT_EQ(d->top_k, 20);
  EXPECT_FLOAT_EQ(d->top_p, 0.9f);
  EXPECT_FLOAT_EQ(d->min_p, 0.05f);  // not in the file
  EXPECT_NE(d->source.find("general.sampling.top_k"), std::string::npos) << d->source;
  SamplingFlags flags;
  flags.temperature = 0.0f;
  flags.top_k = 0;
  d = sampling_defaults_for(m.file, flags);
  ASSERT_TRUE(d.ok());
  EXPECT_FLOAT_EQ(d->temperature, 0.0f);
  EXPECT_EQ(d->top_k, 0);
  EXPECT_FLOAT_EQ(d->top_p, 0.9f);
}

TEST(SamplingDefaults, KeysOfTheWrongTypeOrOutOfRangeAreRefused) {
  const Synthetic out_of_range = model_with([](gguf::Writer& w) { w.set_f32("general.sampling.top_p", 3.0f); });
  const auto d = sampling_defaults_for(out_of_range.file, {});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("general.sampling.top_p"), std::string::npos) << d.error().message();
  const Synthetic wrong_type = model_with([](gguf::Writer& w) { w.set_string("general.sampling.temp", "hot"); });
  EXPECT_FALSE(sampling_defaults_for(wrong_type.file, {}).ok());
}

}  // namespace
}  // namespace mnemo::server
