#include "loadgen/dataset.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mnemo::loadgen {
namespace {

using nlohmann::json;

Result<DatasetConversation> parse_conversation(const json& object) {
  if (!object.is_object()) return make_error("not a JSON object");
  DatasetConversation conversation;
  if (const auto id = object.find("id"); id != object.end() && id->is_string()) conversation.id = id->get<std::string>();
  const auto messages = object.find("conversations");
  if (messages == object.end() || !messages->is_array()) return make_error("no 'conversations' array");

  const std::string* pending_user = nullptr;
  for (const json& message : *messages) {
    const auto from = message.find("from");
    const auto value = message.find("value");
    if (!message.is_object() || from == message.end() || value == message.end() || !from->is_string() ||
        !value->is_string()) {
      return make_error("a message lacks string 'from' and 'value'");
    }
    const std::string& speaker = from->get_ref<const std::string&>();
    if (speaker == "human") {
      if (pending_user != nullptr) break;  // two questions in a row: stop here
      pending_user = &value->get_ref<const std::string&>();
    } else if (speaker == "gpt") {
      if (pending_user == nullptr) {
        if (conversation.turns.empty()) continue;  // a greeting before the first question
        break;
      }
      conversation.turns.push_back({*pending_user, value->get<std::string>()});
      pending_user = nullptr;
    } else {
      break;
    }
  }
  return conversation;
}

}  // namespace

Result<std::vector<DatasetConversation>> parse_sharegpt(std::string_view text, std::string_view name) {
  std::vector<DatasetConversation> conversations;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int line_number = 1; std::getline(lines, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) return make_error("{}:{}: not valid JSON", name, line_number);
    auto conversation = parse_conversation(object);
    if (!conversation.ok()) return conversation.error().with_context(fmt::format("{}:{}", name, line_number));
    if (!conversation->turns.empty()) conversations.push_back(std::move(*conversation));
  }
  return conversations;
}

Result<std::vector<DatasetConversation>> load_sharegpt(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return make_error("{}: cannot open the conversation data set", path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse_sharegpt(text.str(), path);
}

}  // namespace mnemo::loadgen
