// Spelling suggestions for diagnostics: "did you mean 'full_shard'?" and
// "expected one of 'a', 'b' or 'c'".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen {

// The candidate closest to `word` by edit distance, if it is close enough to
// be a likely misspelling (at most a third of the word's length, at least 1);
// empty otherwise. Words longer than 64 bytes get no suggestion.
std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates);

// 'a', 'b' or 'c'
std::string quoted_choices(const std::vector<std::string_view>& candidates,
                           std::string_view last_sep = " or ");

}  // namespace fsdpgen
