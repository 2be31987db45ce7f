// Pass: the compiler's passes in their order, by name:
//   frontend -> support -> lower -> schedule -> memory -> verify -> cost -> emit -> build
// lower -> cost are the planner's steps (codegen/planner/Planner.h's PlanStep).
// codegen/driver/Pipeline.h runs them.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "codegen/planner/Planner.h"

namespace fsdpgen {

enum class Pass { Frontend, Support, Lower, Schedule, Memory, Verify, Cost, Emit, Build };
inline constexpr std::array<std::string_view, 9> kPassNames = {
    "frontend", "support", "lower", "schedule", "memory", "verify", "cost", "emit", "build"};
inline std::string_view to_string(Pass p) {
  return kPassNames[static_cast<int>(p)];
}
// The pass a --dump-after or --stop-after name means, or none.
inline std::optional<Pass> pass_named(std::string_view name) {
  auto it = std::find(kPassNames.begin(), kPassNames.end(), name);
  if (it == kPassNames.end()) return std::nullopt;
  return static_cast<Pass>(it - kPassNames.begin());
}
// The planner's steps are the passes from lower to cost, in its order.
inline constexpr Pass pass_of(PlanStep step) {
  return static_cast<Pass>(static_cast<int>(Pass::Lower) + static_cast<int>(step));
}
static_assert(kPassNames[static_cast<int>(pass_of(PlanStep::Lower))] == kPlanStepNames.front() &&
              kPassNames[static_cast<int>(pass_of(PlanStep::Cost))] == kPlanStepNames.back() &&
              kPassNames[static_cast<int>(pass_of(PlanStep::Verify))] == "verify");

}  // namespace fsdpgen
