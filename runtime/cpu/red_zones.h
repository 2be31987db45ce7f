// red_zones: the checks of a binary built with `fsdpgen build --check`. The
// planner put every buffer between two red zones that no buffer live at the
// same time overlaps (codegen/planner/Memory.h); the executor runs the ops one at a
// time in issue order, and around each op:
//   red_zones_arm: the red zones of the buffers the op brings to life get a
//     canary pattern, and are poisoned for AddressSanitizer (the binary is
//     built with -fsanitize=address, so instrumented code, the generated ops
//     and custom layers, stops at the writing line);
//   red_zones_check: every live buffer's red zones still hold the pattern
//     (catches what uninstrumented code, the runtime's kernels, wrote), else
//     a red_zone_error naming the op, the buffer and the side; the zones of
//     the buffers the op frees are unpoisoned for the next buffers there.
#pragma once

#include <cstddef>
#include <stdexcept>

#include "runtime/program.h"

struct red_zone_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether the program was built with red zones.
inline bool red_zones_enabled(const program& p) {
  return p.plan.red_zone_bytes > 0 && p.buffer_life != nullptr;
}

// Before op `op` (issue position) runs.
void red_zones_arm(const program& p, std::byte* device, std::byte* host, int op);
// After it ran; throws red_zone_error.
void red_zones_check(const program& p, std::byte* device, std::byte* host, int op);
