#include "engine/sequence.h"

#include <algorithm>

namespace mnemo {

Sequence::Sequence(std::shared_ptr<RequestState> request_state, int32_t choice_index, uint64_t arrival_order,
                   const Tokenizer& tokenizer, std::vector<std::string> stops)
    : request(std::move(request_state)),
      choice(choice_index),
      arrival(arrival_order),
      detokenizer(tokenizer),
      stop_matcher(std::move(stops)) {}

std::string streamed_text(const Tokenizer& tokenizer, const std::vector<std::string>& stops, const std::vector<TokenId>& tokens) {
  StreamingDetokenizer detokenizer(tokenizer);
  StopMatcher stop_matcher(stops);
  std::string text;
  for (const TokenId t : tokens) text += stop_matcher.push(detokenizer.push(t)).text;
  return text;
}

void insert_in_order(std::list<std::unique_ptr<Sequence>>& list, std::unique_ptr<Sequence> seq) {
  const auto earlier = [](const Sequence& a, const Sequence& b) {
    return a.arrival != b.arrival ? a.arrival < b.arrival : a.choice < b.choice;
  };
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& other) { return earlier(*seq, *other); });
  list.insert(it, std::move(seq));
}

}  // namespace mnemo
