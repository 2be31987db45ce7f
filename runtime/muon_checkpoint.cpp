// muon_checkpoint: Muon's compacted AdamW state and owners' momentum to and
// from the checkpoint's planes (runtime/muon_checkpoint.h).
#include "runtime/muon_checkpoint.h"

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
  muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  std::fill(planes, planes + 2 * u.shard_elems, 0.0f);
  adamw_parts(c, unit, planes, true);
  const float* momentum = momentum_of(c);
  size_t n = 0;
  for (const muon_transfer& t : l.to_owners)
    comm_irecv(comm, planes + t.shard_offset, t.elems * 4, t.peer, t.matrix,
               c.muon->scatter_requests[n++]);
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    comm_isend(comm, momentum + m.momentum_offset + t.matrix_begin, t.elems * 4, t.peer, t.matrix,
               c.muon->scatter_requests[n++]);
  }
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    std::memcpy(planes + t.shard_offset, momentum + m.momentum_offset + t.matrix_begin,
                static_cast<size_t>(t.elems) * 4);
  }
  for (size_t i = 0; i < n; ++i)
    comm_wait(c.muon->scatter_requests[i]);
}

void muon_state_from_planes(step_context& c, int unit, const float* planes, MPI_Comm comm) {
  const program& p = *c.p;
  muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  adamw_parts(c, unit, const_cast<float*>(planes), false);
  float* momentum = momentum_of(c);
  size_t n = 0;
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    comm_irecv(comm, momentum + m.momentum_offset + t.matrix_begin, t.elems * 4, t.peer, t.matrix,
               c.muon->gather_requests[n++]);
  }
  for (const muon_transfer& t : l.to_owners)
    comm_isend(comm, planes + t.shard_offset, t.elems * 4, t.peer, t.matrix,
               c.muon->gather_requests[n++]);
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    std::memcpy(momentum + m.momentum_offset + t.matrix_begin, planes + t.shard_offset,
                static_cast<size_t>(t.elems) * 4);
  }
  for (size_t i = 0; i < n; ++i)
    comm_wait(c.muon->gather_requests[i]);
}
