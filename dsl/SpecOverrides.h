// SpecOverrides: the command-line values that replace a spec's (--world,
// --micro-batch), which the checker applies (Check.h) and every front-end
// call passes on (Frontend.h).
#pragma once

#include <cstdint>
#include <optional>

namespace fsdpgen {

// Command-line values that replace the spec's, checked like the spec's own.
struct SpecOverrides {
  std::optional<int64_t> world;
  std::optional<int64_t> micro_batch;
};

}  // namespace fsdpgen
