// Alternatives: tune's search, twice at most, as the rows plan's report gives.
#include "codegen/planner/Alternatives.h"

#include <algorithm>

#include <fmt/format.h>

#include "codegen/planner/Tune.h"

namespace fsdpgen {
namespace {

// Candidates fitting_alternatives takes from each search, before it drops
// those that only add changes to one it gave.
constexpr int64_t kAlternativesSearched = 2 * kAlternatives;

}  // namespace

std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw) {
  const int64_t global = spec.global_batch();
  std::vector<Alternative> out;
  std::vector<std::vector<std::string>> given;  // each row's changes, sorted
  // A candidate that only adds changes to a row already given (as fast or
  // faster) is not another piece of advice.
  auto add = [&](const TuneCandidate& c) {
    std::vector<std::string> changes = c.changes;
    std::sort(changes.begin(), changes.end());
    for (const auto& g : given)
      if (std::includes(changes.begin(), changes.end(), g.begin(), g.end())) return;
    given.push_back(changes);
    const int64_t batch = c.spec.global_batch();
    out.push_back({fmt::format("{}", fmt::join(c.changes, ", ")), c.device_bytes, c.host_bytes,
                   c.step_ms, c.tokens_per_s_per_gpu, batch, batch != global});
  };
  TuneOptions o;
  o.top = kAlternativesSearched;
  // The reduce dtype is a numerics choice and prefetch a speed one: neither
  // is how a plan is made to fit (tune varies them).
  o.keep = {"precision", "prefetch"};
  for (const TuneCandidate& c : tune(spec, hw, o).top)
    if (out.size() < static_cast<size_t>(kAlternatives)) add(c);
  if (out.empty()) {
    o.allow_batch_change = true;
    for (const TuneCandidate& c : tune(spec, hw, o).top)
      if (c.batch_changed && out.size() < static_cast<size_t>(kAlternatives)) add(c);
  }
  return out;
}

}  // namespace fsdpgen
