#include "engine/sequence.h"

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

}  // namespace mnemo
