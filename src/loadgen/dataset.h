// Multi-turn conversations in the ShareGPT format, one JSON object a line:
//   {"id": "...", "conversations": [{"from": "human" | "gpt", "value": "..."}, ...]}
// A conversation becomes a list of (user message, dataset reply) turns. The replies matter even
// though the server writes its own: each reply's length fixes the length the server is asked to
// generate, and its text is what the next turn's history carries.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::loadgen {

struct DatasetTurn {
  std::string user;
  std::string reply;
};

struct DatasetConversation {
  std::string id;
  std::vector<DatasetTurn> turns;
};

// Reads a ShareGPT JSONL file. Turns are taken while the speakers alternate human, gpt; a
// conversation stops at the first irregularity (two messages of one side in a row, an unknown
// speaker, a final question without a reply). Leading gpt messages are skipped. Conversations
// left with no turn are dropped. Malformed JSON is an Error naming the file and line.
Result<std::vector<DatasetConversation>> load_sharegpt(const std::string& path);

// The same from text already in memory; `name` appears in errors.
Result<std::vector<DatasetConversation>> parse_sharegpt(std::string_view text, std::string_view name);

}  // namespace mnemo::loadgen
