// muon_checkpoint: Muon's compacted AdamW state and owners' momentum to and
// from the checkpoint's planes (runtime/train/muon_checkpoint.h).
#include "runtime/train/muon_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "runtime/muon_layout.h"

namespace {

float* momentum_of(step_context& c) {
  return step_buffer<float>(c, static_cast<int>(c.p->plan.muon_momentum_buffer));
}

// The AdamW parts of the shard between the compacted state (m, then v,
// state_stride apart) and the planes (m, then v, shard_elems apart).
void adamw_parts(step_context& c, int unit, float* planes, bool to_planes) {
  const program_unit& u = c.p->units[unit];
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  if (u.optimizer_state < 0) return;
  float* state = step_buffer<float>(c, u.optimizer_state);
  for (const muon_shard_part& part : l.parts) {
    if (part.matrix >= 0) continue;
    const size_t n = static_cast<size_t>(part.end - part.begin) * 4;
    for (int plane = 0; plane < 2; ++plane) {
      float* compact = state + plane * l.state_stride + part.state_offset;
      float* flat = planes + plane * u.shard_elems + part.begin;
      if (to_planes)
        std::memcpy(flat, compact, n);
      else
        std::memcpy(compact, flat, n);
    }
  }
}

}  // namespace

void muon_state_to_planes(step_context& c, int unit, float* planes, MPI_Comm comm) {
  const program& p = *c.p;
  const program_unit& u = p.units[unit];
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  std::fill(planes, planes + 2 * u.shard_elems, 0.0f);
  adamw_parts(c, unit, planes, true);
  float* momentum = momentum_of(c);
  muon_exchange(
      l, comm, c.muon->scatter_requests, 4, false,
      [&](const muon_transfer& t) { return static_cast<void*>(planes + t.shard_offset); },
      [&](const muon_transfer& t) {
        return static_cast<void*>(momentum + p.muon_matrices[t.matrix].momentum_offset +
                                  t.matrix_begin);
      });
}

void muon_state_from_planes(step_context& c, int unit, const float* planes, MPI_Comm comm) {
  const program& p = *c.p;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  float* flat = const_cast<float*>(planes);
  adamw_parts(c, unit, flat, false);
  float* momentum = momentum_of(c);
  muon_exchange(
      l, comm, c.muon->gather_requests, 4, true,
      [&](const muon_transfer& t) { return static_cast<void*>(flat + t.shard_offset); },
      [&](const muon_transfer& t) {
        return static_cast<void*>(momentum + p.muon_matrices[t.matrix].momentum_offset +
                                  t.matrix_begin);
      });
}
