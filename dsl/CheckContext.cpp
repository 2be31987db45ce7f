// CheckContext: where each key was written; see CheckContext.h.
#include "dsl/CheckContext.h"

#include <algorithm>

namespace fsdpgen {

Span Keys::where(const std::string& key, Span fallback) const {
  auto it = value_at.find(key);
  return it == value_at.end() ? fallback : it->second;
}

Span Keys::entry(const std::string& key) const {
  auto it = entry_at.find(key);
  return it == entry_at.end() ? where(key) : it->second;
}

bool Keys::usable(std::initializer_list<std::string_view> keys) const {
  return std::none_of(keys.begin(), keys.end(),
                      [&](std::string_view k) { return rejected.count(std::string(k)) > 0; });
}

bool Keys::rejected_under(std::string_view prefix) const {
  return std::any_of(rejected.begin(), rejected.end(),
                     [&](const std::string& k) { return k.starts_with(prefix); });
}

}  // namespace fsdpgen
