#include "engine/sequence.h"

namespace mnemo {

Sequence::Sequence(std::shared_ptr<RequestState> request_state, int32_t choice_index, uint64_t arrival_order,
                   const Tokenizer& tokenizer, std::vector<std::string> stops)
    : request(std::move(request_state)),
      choice(choice_index),
      arrival(arrival_order),
      detokenizer(tokenizer),
      stop_matcher(std::move(stops)) {}

}  // namespace mnemo
