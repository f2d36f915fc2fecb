// Tool calling's chat side: the format each real template shows, tools and tool turns rendered
// through the real templates, each family's parser on recorded outputs (the formats the model
// cards document), the generic format's messages, and the envelope's schema.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "grammar/schema_matcher_set.h"

namespace mnemo {
namespace {

using nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MNEMO_SOURCE_DIR) + "/tests/chat/templates/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ChatTemplate load(const std::string& name) {
  auto parsed = ChatTemplate::parse(read_template(name));
  EXPECT_TRUE(parsed.ok()) << name;
  return std::move(parsed).value();
}

const ToolSpec kWeather{"get_weather", "Current weather in a city",
                        json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"), false};
const ToolSpec kAdd{"add", "Adds two integers",
                    json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})"),
                    true};

ToolUse use_of(std::vector<ToolSpec> tools, ToolChoice choice = ToolChoice::kAuto) {
  ToolUse use;
  use.tools = std::move(tools);
  use.choice = choice;
  return use;
}

// A conversation with a call and its result.
std::vector<ChatMessage> round_trip() {
  std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}, {"assistant", ""}, {"tool", "21 C"}};
  messages[1].content_null = true;
  messages[1].tool_calls = {{"call_1", "get_weather", R"({"city": "Paris"})"}};
  messages[2].tool_call_id = "call_1";
  return messages;
}

TEST(ToolFormat, ComesFromTheTemplatesMarkers) {
  EXPECT_EQ(tool_format_of(read_template("Qwen-Qwen2.5-7B-Instruct.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_of(read_template("meta-llama-Llama-3.1-8B-Instruct.jinja")), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_of(read_template("meta-llama-Llama-3.2-3B-Instruct.jinja")), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_of(read_template("mistralai-Mistral-Nemo-Instruct-2407.jinja")), ToolFormat::kMistral);
  EXPECT_EQ(tool_format_of(read_template("google-gemma-2-2b-it.jinja")), ToolFormat::kGeneric);
  EXPECT_EQ(tool_format_of(ChatTemplate::builtin("chatml")->source()), ToolFormat::kGeneric);
  EXPECT_EQ(tool_format_of(ChatTemplate::builtin("llama3")->source()), ToolFormat::kGeneric);  // knows no tools
}

TEST(ToolRendering, QwenRendersToolsCallsAndResultsItsWay) {
  const ChatTemplate qwen = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  const ToolUse use = use_of({kWeather});
  ChatTemplateOptions options;
  options.tools = tools_for_template(ToolFormat::kHermes, use);
  auto text = qwen.render(messages_for_template(ToolFormat::kHermes, round_trip(), use), options);
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_NE(text->find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << *text;
  EXPECT_NE(text->find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                       "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n"
                       "<|im_start|>assistant\n"),
            std::string::npos)
      << *text;
}

TEST(ToolRendering, LlamaAndMistralTemplatesAcceptToolsAndToolTurns) {
  const ToolUse use = use_of({kWeather});
  for (const auto& [name, format, marker] : std::vector<std::tuple<std::string, ToolFormat, std::string>>{
           {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3, "<|start_header_id|>ipython<|end_header_id|>"},
           {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral, "[TOOL_RESULTS]"}}) {
    ChatTemplateOptions options;
    options.bos_token = "<s>";
    options.tools = tools_for_template(format, use);
    auto text = load(name).render(messages_for_template(format, round_trip(), use), options);
    ASSERT_TRUE(text.ok()) << name << ": " << text.error().message();
    EXPECT_NE(text->find("get_weather"), std::string::npos) << *text;
    EXPECT_NE(text->find(marker), std::string::npos) << *text;
    EXPECT_NE(text->find("21 C"), std::string::npos) << *text;
  }
}

TEST(ToolParsing, HermesRecordedOutput) {
  // Qwen2.5's function-calling guide, two parallel calls.
  const ParsedReply reply = parse_reply(ToolFormat::kHermes, false,
                                        "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San "
                                        "Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", "
                                        "\"arguments\": {\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>");
  ASSERT_EQ(reply.calls.size(), 2u);
  EXPECT_EQ(reply.calls[0].name, "get_current_temperature");
  EXPECT_EQ(json::parse(reply.calls[0].arguments), json({{"location", "San Francisco, CA, USA"}}));
  EXPECT_EQ(json::parse(reply.calls[1].arguments)["date"], "2024-10-01");
  EXPECT_TRUE(reply.content.empty());
  EXPECT_NE(reply.calls[0].id, reply.calls[1].id);
  EXPECT_EQ(reply.calls[0].id.rfind("call_", 0), 0u);
  // Text around a call is the content; a call that is not JSON stays text.
  const ParsedReply mixed = parse_reply(ToolFormat::kHermes, false, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(mixed.content, "Let me check.");
  ASSERT_EQ(mixed.calls.size(), 1u);
  EXPECT_EQ(mixed.calls[0].arguments, "{}");
  const ParsedReply broken = parse_reply(ToolFormat::kHermes, false, "<tool_call>not json</tool_call>");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "<tool_call>not json</tool_call>");
}

TEST(ToolParsing, HermesCallWithoutItsTagsIsACallWhenItIsTheWholeReply) {
  // Qwen2.5-Coder-0.5B-Instruct's reply to a weather question with a get_weather tool (recorded).
  const ParsedReply bare = parse_reply(ToolFormat::kHermes, false, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(bare.calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_TRUE(bare.content.empty());
  const ParsedReply fenced = parse_reply(ToolFormat::kHermes, false, "```json\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n```");
  ASSERT_EQ(fenced.calls.size(), 1u);
  EXPECT_EQ(fenced.calls[0].name, "f");
  // JSON as part of an answer, or an object of another shape, is text.
  for (const char* text : {"Here: {\"name\": \"f\", \"arguments\": {}}", "{\"name\": \"Ada\", \"age\": 36}",
                           "{\"name\": \"f\", \"arguments\": \"x\"}", "{\"name\": \"f\", \"arguments\": {}, \"extra\": 1}"}) {
    const ParsedReply reply = parse_reply(ToolFormat::kHermes, false, text);
    EXPECT_TRUE(reply.calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
  }
}

TEST(ToolParsing, Llama3RecordedOutput) {
  // Llama 3.1's model card: JSON-based tool calling, "parameters" for the arguments.
  const ParsedReply reply = parse_reply(ToolFormat::kLlama3, false,
                                        "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", "
                                        "\"unit\": \"Fahrenheit\"}}");
  ASSERT_EQ(reply.calls.size(), 1u);
  EXPECT_EQ(reply.calls[0].name, "get_current_conditions");
  EXPECT_EQ(json::parse(reply.calls[0].arguments)["unit"], "Fahrenheit");
  const ParsedReply tagged = parse_reply(ToolFormat::kLlama3, false, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}");
  ASSERT_EQ(tagged.calls.size(), 2u);
  EXPECT_EQ(tagged.calls[1].name, "b");
  const ParsedReply prose = parse_reply(ToolFormat::kLlama3, false, "{Curly} prose is not a call.");
  EXPECT_TRUE(prose.calls.empty());
  EXPECT_EQ(prose.content, "{Curly} prose is not a call.");
}

TEST(ToolParsing, MistralRecordedOutput) {
  const ParsedReply reply = parse_reply(ToolFormat::kMistral, false,
                                        "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", "
                                        "\"format\": \"celsius\"}, \"id\": \"abcDEF123\"}]");
  ASSERT_EQ(reply.calls.size(), 1u);
  EXPECT_EQ(reply.calls[0].name, "get_current_weather");
  EXPECT_EQ(json::parse(reply.calls[0].arguments)["format"], "celsius");
  EXPECT_EQ(parse_reply(ToolFormat::kMistral, false, "Just text.").content, "Just text.");
}

TEST(ToolParsing, EnvelopeWholeAndCutShort) {
  const ParsedReply calls = parse_reply(ToolFormat::kGeneric, true,
                                        R"({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"arguments": {"city": "Oslo"}, "name": "get_weather"}]})");
  ASSERT_EQ(calls.calls.size(), 2u);
  EXPECT_EQ(calls.calls[0].arguments, R"({"a":1,"b":2})");
  EXPECT_EQ(calls.calls[1].name, "get_weather");
  EXPECT_EQ(parse_reply(ToolFormat::kGeneric, true, R"({"response": "It is \"sunny\"."})").content, "It is \"sunny\".");
  // A length limit mid-way: the whole calls are kept, the cut one dropped.
  const ParsedReply cut = parse_reply(ToolFormat::kGeneric, true,
                                      R"({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": "Os)");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].name, "add");
  const ParsedReply none = parse_reply(ToolFormat::kGeneric, true, R"({"tool_calls": [{"name": "ad)");
  EXPECT_TRUE(none.calls.empty());
  EXPECT_EQ(none.content, R"({"tool_calls": [{"name": "ad)");
}

TEST(GenericTools, MessagesDescribeToolsAndTurnCallsAndResultsIntoText) {
  std::vector<ChatMessage> messages = {{"system", "Be brief."}};
  for (ChatMessage& m : round_trip()) messages.push_back(m);
  messages.emplace_back("tool", "5");
  messages.back().tool_call_id = "call_2";
  const std::vector<ChatMessage> out = messages_for_template(ToolFormat::kGeneric, messages, use_of({kWeather, kAdd}));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_EQ(out[0].content.rfind("Be brief.\n\nYou can call these tools:\n[{\"name\":\"get_weather\"", 0), 0u) << out[0].content;
  EXPECT_NE(out[0].content.find("{\"response\""), std::string::npos);  // auto: a reply is allowed
  EXPECT_EQ(out[2].role, "assistant");
  EXPECT_EQ(out[2].content, R"({"tool_calls":[{"arguments":{"city":"Paris"},"name":"get_weather"}]})");
  EXPECT_EQ(out[3].role, "user");  // both results, one turn
  EXPECT_EQ(out[3].content, "The tool get_weather returned: 21 C\nThe tool call call_2 returned: 5");
  // Templates that insist on alternating roles take it.
  auto gemma = ChatTemplate::builtin("gemma");
  ASSERT_TRUE(gemma.ok());
  auto text = gemma->render(out, ChatTemplateOptions{});
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_NE(text->find("The tool get_weather returned: 21 C"), std::string::npos);
  // With tool_choice none the tools are not described, and the history still reads.
  const auto plain = messages_for_template(ToolFormat::kGeneric, messages, use_of({kWeather}, ToolChoice::kNone));
  EXPECT_EQ(plain[0].content, "Be brief.");
  EXPECT_TRUE(tools_for_template(ToolFormat::kGeneric, use_of({kWeather})).is_null());
}

bool envelope_accepts(const grammar::CompiledSchema& schema, const std::string& text) {
  grammar::SchemaMatcherSet m(&schema);
  return m.feed(text) && m.complete();
}

TEST(EnvelopeSchema, FollowsTheChoice) {
  auto any = envelope_schema(use_of({kWeather, kAdd}));
  ASSERT_TRUE(any.ok()) << any.error().message();
  EXPECT_TRUE(envelope_accepts(*any, R"({"response":"hi"})"));
  EXPECT_TRUE(envelope_accepts(*any, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}},{"name":"get_weather","arguments":{"city":"x"}}]})"));
  EXPECT_FALSE(envelope_accepts(*any, R"({"tool_calls":[{"name":"add","arguments":{"a":"1","b":2}}]})"));
  EXPECT_FALSE(envelope_accepts(*any, R"({"tool_calls":[{"name":"sub","arguments":{}}]})"));

  auto required = envelope_schema(use_of({kWeather, kAdd}, ToolChoice::kRequired));
  ASSERT_TRUE(required.ok());
  EXPECT_FALSE(envelope_accepts(*required, R"({"response":"hi"})"));
  EXPECT_TRUE(envelope_accepts(*required, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"x"}}]})"));

  ToolUse named = use_of({kWeather, kAdd}, ToolChoice::kNamed);
  named.forced_name = "add";
  named.parallel = false;
  auto forced = envelope_schema(named);
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(envelope_accepts(*forced, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})"));
  EXPECT_FALSE(envelope_accepts(*forced, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"x"}}]})"));
  EXPECT_FALSE(envelope_accepts(*forced, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}},{"name":"add","arguments":{"a":1,"b":2}}]})"));
}

TEST(EnvelopeSchema, ParametersItCannotEnforce) {
  ToolSpec loose{"search", "", json::parse(R"({"type":"object","properties":{"q":{"type":"number","minimum":1}}})"), false};
  auto lenient = envelope_schema(use_of({loose}, ToolChoice::kRequired));
  ASSERT_TRUE(lenient.ok());  // not strict: any object for its arguments
  EXPECT_TRUE(envelope_accepts(*lenient, R"({"tool_calls":[{"name":"search","arguments":{"anything":[1,2]}}]})"));
  loose.strict = true;
  auto strict = envelope_schema(use_of({loose}, ToolChoice::kRequired));
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message().find("minimum"), std::string::npos) << strict.error().message();
  EXPECT_FALSE(envelope_forced(ToolFormat::kHermes, use_of({kWeather})));  // native auto: the model's own format
  EXPECT_TRUE(envelope_forced(ToolFormat::kHermes, use_of({kWeather}, ToolChoice::kRequired)));
  EXPECT_TRUE(envelope_forced(ToolFormat::kGeneric, use_of({kWeather})));
  EXPECT_FALSE(envelope_forced(ToolFormat::kGeneric, use_of({kWeather}, ToolChoice::kNone)));
}

}  // namespace
}  // namespace mnemo
