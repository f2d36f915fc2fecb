#include "tokenizer/pre_tokenizer.h"

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cstdint>

namespace mnemo::tokenizer {

struct PreTokenizer::CompiledRegex {
  std::unique_ptr<icu::RegexPattern> pattern;
};

namespace {

enum CharClass : uint8_t {
  kPresent = 1,  // inside the word being split (llama.cpp's scanners treat the outside as "no class")
  kLetter = 2,
  kNumber = 4,
  kWhitespace = 8,  // Unicode White_Space, which is what llama.cpp means by \s
};
constexpr uint8_t kLetterNumberOrSpace = kLetter | kNumber | kWhitespace;
constexpr char32_t kNoCodepoint = 0xFFFFFFFF;

uint8_t classify(char32_t codepoint) {
  const auto c = static_cast<UChar32>(codepoint);
  const uint32_t category = U_GET_GC_MASK(c);
  uint8_t classes = kPresent;
  if ((category & U_GC_L_MASK) != 0) classes |= kLetter;
  if ((category & U_GC_N_MASK) != 0) classes |= kNumber;
  if (u_isUWhiteSpace(c)) classes |= kWhitespace;
  return classes;
}

// One word being split by a scanner; positions are indices into the whole text, and everything
// outside [begin, end) reads as absent.
struct Chunk {
  std::span<const char32_t> codepoints;
  std::span<const uint8_t> classes;
  size_t begin;
  size_t end;

  char32_t at(size_t pos) const { return pos >= begin && pos < end ? codepoints[pos] : kNoCodepoint; }
  uint8_t classes_at(size_t pos) const { return pos >= begin && pos < end ? classes[pos] : 0; }
  bool has(size_t pos, uint8_t mask) const { return (classes_at(pos) & mask) != 0; }
  // Present, but not a letter, number or whitespace: [^\s\p{L}\p{N}].
  bool is_other(size_t pos) const { return classes_at(pos) == kPresent; }
  static bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }
};

// Length of 's 't 're 've 'm 'll 'd at `pos`, or 0.
size_t contraction_length(const Chunk& chunk, size_t pos, bool ignore_case) {
  if (chunk.at(pos) != '\'' || pos + 1 >= chunk.end) return 0;
  auto fold = [&](char32_t c) { return ignore_case ? static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))) : c; };
  const char32_t first = fold(chunk.at(pos + 1));
  if (first == 's' || first == 't' || first == 'm' || first == 'd') return 2;
  if (pos + 2 >= chunk.end) return 0;
  const char32_t second = fold(chunk.at(pos + 2));
  const bool two_letters = (first == 'r' && second == 'e') || (first == 'v' && second == 'e') || (first == 'l' && second == 'l');
  return two_letters ? 3 : 0;
}

// \s+(?!\S) then \s+: a whitespace run gives up its last character to a following word.
size_t whitespace_word_end(const Chunk& chunk, size_t pos) {
  size_t count = 0;
  while (chunk.has(pos + count, kWhitespace)) ++count;
  if (count > 1 && chunk.at(pos + count) != kNoCodepoint) return pos + count - 1;
  return pos + std::max<size_t>(count, 1);
}

size_t gpt2_word_end(const Chunk& chunk, size_t pos) {
  if (const size_t contraction = contraction_length(chunk, pos, /*ignore_case=*/false)) return pos + contraction;
  const bool leading_space = chunk.at(pos) == ' ';
  const size_t first = pos + (leading_space ? 1 : 0);
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
  for (const uint8_t run_class : {uint8_t{kLetter}, uint8_t{kNumber}}) {
    if (chunk.has(first, run_class)) {
      size_t end = first;
      while (chunk.has(end, run_class)) ++end;
      return end;
    }
  }
  if (chunk.is_other(first)) {
    size_t end = first;
    while (chunk.is_other(end)) ++end;
    return end;
  }
  return whitespace_word_end(chunk, pos);
}

size_t llama3_word_end(const Chunk& chunk, size_t pos, size_t max_digits) {
  if (const size_t contraction = contraction_length(chunk, pos, /*ignore_case=*/true)) return pos + contraction;
  const char32_t c = chunk.at(pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!Chunk::is_newline(c) && !chunk.has(pos, kNumber) && (chunk.has(pos, kLetter) || chunk.has(pos + 1, kLetter))) {
    size_t end = pos + 1;
    while (chunk.has(end, kLetter)) ++end;
    return end;
  }
  // \p{N}{1,max_digits}
  if (chunk.has(pos, kNumber)) {
    size_t end = pos;
    while (end - pos < max_digits && chunk.has(end, kNumber)) ++end;
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const bool leading_space = c == ' ';
  if ((chunk.classes_at(pos + (leading_space ? 1 : 0)) & kLetterNumberOrSpace) == 0) {
    size_t end = pos + (leading_space ? 1 : 0);
    while (chunk.is_other(end)) ++end;
    while (Chunk::is_newline(chunk.at(end))) ++end;
    return end;
  }
  // \s*[\r\n]+ : up to the last newline of the whitespace run
  size_t after_last_newline = 0;
  for (size_t i = pos; chunk.has(i, kWhitespace); ++i) {
    if (Chunk::is_newline(chunk.at(i))) after_last_newline = i + 1;
  }
  if (after_last_newline > 0) return after_last_newline;
  return whitespace_word_end(chunk, pos);
}

void split_with_regex(const icu::RegexPattern& pattern, std::span<const char32_t> codepoints,
                      const std::vector<size_t>& words, std::vector<size_t>& out) {
  icu::UnicodeString text;
  std::vector<int32_t> utf16_offsets(codepoints.size() + 1);
  for (size_t i = 0; i < codepoints.size(); ++i) {
    utf16_offsets[i] = text.length();
    const char32_t c = codepoints[i];
    // A lone surrogate (tolerated in llama.cpp's decoding) must not pair up with its neighbour.
    text.append(static_cast<UChar32>(c >= 0xD800 && c <= 0xDFFF ? 0xFFFD : c));
  }
  utf16_offsets[codepoints.size()] = text.length();
  auto codepoint_index = [&](int32_t utf16_offset) {
    return static_cast<size_t>(std::lower_bound(utf16_offsets.begin(), utf16_offsets.end(), utf16_offset) -
                               utf16_offsets.begin());
  };

  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(pattern.matcher(text, status));
  size_t word_begin = 0;
  for (const size_t length : words) {
    const size_t word_end = word_begin + length;
    size_t cursor = word_begin;
    if (U_SUCCESS(status)) {
      // Opaque region bounds: lookaheads see the word's end as the end of the text, like std::regex
      // iterating over the word in llama.cpp.
      matcher->region(utf16_offsets[word_begin], utf16_offsets[word_end], status);
      while (U_SUCCESS(status) && matcher->find(status)) {
        const size_t match_begin = codepoint_index(matcher->start(status));
        const size_t match_end = codepoint_index(matcher->end(status));
        if (match_begin > cursor) out.push_back(match_begin - cursor);
        if (match_end > match_begin) out.push_back(match_end - match_begin);
        cursor = std::max(cursor, match_end);
      }
    }
    if (cursor < word_end) out.push_back(word_end - cursor);
    word_begin = word_end;
  }
}

}  // namespace

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Status PreTokenizer::add_regex_step(const std::string& pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error{};
  auto compiled = std::make_unique<CompiledRegex>();
  compiled->pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse_error, status));
  if (U_FAILURE(status) || compiled->pattern == nullptr) {
    return make_error("pre-tokenizer regex '{}' does not compile: {}", pattern, u_errorName(status));
  }
  Step step;
  step.regex = std::move(compiled);
  steps_.push_back(std::move(step));
  return ok_status();
}

namespace {

// llama.cpp runs tekken's and o200k's patterns through std::regex on a "collapsed" text (every
// non-ASCII codepoint replaced by a byte naming its category, non-ASCII whitespace by \v), and
// writes their case classes as a lookahead for a letter followed by [^a-z] or [^A-Z]. On the
// collapsed text every non-ASCII letter passes both, so "uppercase" means any letter but a-z and
// "lowercase" any letter but A-Z; \s is any White_Space character (std::regex's [ \t-\r] plus
// the collapsed \v). These are those patterns in ICU's syntax.
constexpr const char* kUpperish = R"([\p{L}&&[^a-z]])";
constexpr const char* kLowerish = R"([\p{L}&&[^A-Z]])";

std::string case_split_pattern(const std::string& contraction, const char* digits) {
  const std::string u = kUpperish, l = kLowerish;
  return "[^\\r\\n\\p{L}\\p{N}]?" + u + "*" + l + "+" + contraction + "|[^\\r\\n\\p{L}\\p{N}]?" + u + "+" + l + "*" +
         contraction + "|" + digits +
         R"(| ?[^\p{White_Space}\p{L}\p{N}]+[\r\n/]*|\p{White_Space}*[\r\n]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";
}

}  // namespace

Result<PreTokenizer> PreTokenizer::create(PreTokenizerKind kind) {
  PreTokenizer pre_tokenizer;
  auto add_scanner = [&](Scanner scanner) {
    Step step;
    step.scanner = scanner;
    pre_tokenizer.steps_.push_back(std::move(step));
  };
  switch (kind) {
    case PreTokenizerKind::kDefault:
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(R"([\p{P}\$\+<=>\^~\|]+)"));
      add_scanner(Scanner::kGpt2);
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(R"(\p{N}+)"));
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(R"([0-9][0-9][0-9])"));
      break;
    case PreTokenizerKind::kGpt2:
      add_scanner(Scanner::kGpt2);
      break;
    case PreTokenizerKind::kLlama3:
      add_scanner(Scanner::kLlama3);
      break;
    case PreTokenizerKind::kQwen2:
      add_scanner(Scanner::kQwen2);
      break;
    case PreTokenizerKind::kStarCoder:
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(R"(\p{N})"));
      add_scanner(Scanner::kGpt2);
      break;
    case PreTokenizerKind::kTekken:
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(case_split_pattern("", R"(\p{N})")));
      break;
    case PreTokenizerKind::kGpt4o:
      MNEMO_RETURN_IF_ERROR(pre_tokenizer.add_regex_step(
          case_split_pattern("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?", R"(\p{N}{1,3})")));
      break;
  }
  return pre_tokenizer;
}

std::vector<size_t> PreTokenizer::split(std::span<const char32_t> codepoints) const {
  std::vector<size_t> words;
  if (codepoints.empty()) return words;
  words.push_back(codepoints.size());

  std::vector<uint8_t> classes;
  std::vector<size_t> next;
  for (const Step& step : steps_) {
    next.clear();
    if (step.regex) {
      split_with_regex(*step.regex->pattern, codepoints, words, next);
    } else {
      if (classes.empty()) {
        classes.resize(codepoints.size());
        for (size_t i = 0; i < codepoints.size(); ++i) classes[i] = classify(codepoints[i]);
      }
      size_t word_begin = 0;
      for (const size_t length : words) {
        const Chunk chunk{codepoints, classes, word_begin, word_begin + length};
        for (size_t pos = chunk.begin; pos < chunk.end;) {
          size_t end = 0;
          switch (step.scanner) {
            case Scanner::kGpt2: end = gpt2_word_end(chunk, pos); break;
            case Scanner::kLlama3: end = llama3_word_end(chunk, pos, 3); break;
            case Scanner::kQwen2: end = llama3_word_end(chunk, pos, 1); break;
          }
          end = std::clamp(end, pos + 1, chunk.end);
          next.push_back(end - pos);
          pos = end;
        }
        word_begin = chunk.end;
      }
    }
    words.swap(next);
  }
  return words;
}

}  // namespace mnemo::tokenizer
