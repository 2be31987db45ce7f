// muon_layout: where this rank's part of optimizer = muon(...) lies, worked
// out once at start from the program's Muon matrices (program.h's
// program_muon_matrix) and the flat layout: which matrices it owns, which
// slices it exchanges with whom in the gather and the scatter, and how its
// shard of each unit divides into AdamW's elements (compacted state) and
// Muon matrices' slices. The step functions (runtime/cpu/step.h's step_muon_*
// and step_optimizer) read it; nothing is decided in the step.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/comm.h"
#include "runtime/muon.h"
#include "runtime/optimizer.h"
#include "runtime/program.h"

// A slice of a matrix that one rank's shard holds: matrix elements
// [matrix_begin, matrix_begin + elems) at shard_offset in that shard. peer:
// the other side of the exchange (the owner, for a slice this rank holds;
// the holder, for a slice of a matrix this rank owns).
struct muon_transfer {
  int matrix = 0;  // index into program::muon_matrices
  int peer = 0;    // rank in the shard group
  int64_t matrix_begin = 0, elems = 0, shard_offset = 0;
};

// A run of this rank's shard of a unit: AdamW's elements (matrix -1; decayed
// or not; their m and v at state_offset in the compacted state) or a slice
// of Muon matrix `matrix` (its update at the same place in the update shard).
struct muon_shard_part {
  int64_t begin = 0, end = 0;
  int matrix = -1;
  bool decayed = false;
  int64_t state_offset = 0;
};

struct muon_unit_layout {
  std::vector<int> owned;                   // matrices this rank orthogonalizes
  std::vector<muon_transfer> to_owners;     // slices it holds of matrices others own
  std::vector<muon_transfer> from_holders;  // slices others hold of matrices it owns
  std::vector<muon_transfer> local;         // slices it holds of matrices it owns
  std::vector<muon_shard_part> parts;       // its shard, in order
  // The gathered buffer (shard group > 1): the fp32 updates of the matrices
  // this rank owns first (gathered_elems floats: the most any rank owns),
  // then their gradients in the grad shard's dtype; each matrix at its
  // gathered_offset in both.
  int64_t gathered_elems = 0;
  // AdamW's m, then v, each this long: the most AdamW elements any rank's
  // shard of the unit has (the planner's muon_unit adamw_elems).
  int64_t state_stride = 0;
};

struct muon_layout {
  std::vector<muon_unit_layout> units;  // per program unit
  // Enough for any unit's exchange, one array for the gathers and one for
  // the scatters: they run on different streams at once.
  std::vector<MPI_Request> gather_requests, scatter_requests;
};

// This rank's layout (shard_rank in its shard group). decay: the AdamW decay
// ranges of its shards (optimizer_decay_ranges). Throws std::runtime_error
// naming the unit when the program's buffers disagree with the layout (a
// compacted state or gathered buffer of another size than planned).
muon_layout muon_layout_of(const program& p, int64_t shard_rank,
                           const optimizer_decay_table& decay);

// Element `elems` of an array of elem_bytes-byte elements.
inline const std::byte* muon_at(const void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<const std::byte*>(base) + elems * elem_bytes;
}
inline std::byte* muon_at(void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<std::byte*>(base) + elems * elem_bytes;
}
// Where the owner keeps matrix m in its gathered buffer of the unit: its
// fp32 update, and its gradient (grad_bytes an element) after the updates.
inline float* muon_gathered_update(void* gathered, const program_muon_matrix& m) {
  return static_cast<float*>(gathered) + m.gathered_offset;
}
inline void* muon_gathered_grad(void* gathered, const muon_unit_layout& l,
                                const program_muon_matrix& m, int64_t grad_bytes) {
  return muon_at(muon_at(gathered, l.gathered_elems, 4), m.gathered_offset, grad_bytes);
}

// Moves every slice of a unit's matrices between the shard that holds it and
// the matrix's owner, elem_bytes an element: towards the owners (to_owner)
// or back to the holders; holder(t) and owner(t) are where slice t lies on
// either side (on this rank: a holder's for to_owners and local, an owner's
// for from_holders and local). Point to point over comm (a shard group's),
// tagged with the matrix; waits for all.
template <class Holder, class Owner>
void muon_exchange(const muon_unit_layout& l, MPI_Comm comm, std::vector<MPI_Request>& requests,
                   int64_t elem_bytes, bool to_owner, Holder holder, Owner owner) {
  size_t n = 0;
  for (const muon_transfer& t : to_owner ? l.from_holders : l.to_owners)
    comm_irecv(comm, to_owner ? owner(t) : holder(t), t.elems * elem_bytes, t.peer, t.matrix,
               requests[n++]);
  for (const muon_transfer& t : to_owner ? l.to_owners : l.from_holders)
    comm_isend(comm, to_owner ? holder(t) : owner(t), t.elems * elem_bytes, t.peer, t.matrix,
               requests[n++]);
  for (const muon_transfer& t : l.local)
    std::memcpy(to_owner ? owner(t) : holder(t), to_owner ? holder(t) : owner(t),
                static_cast<size_t>(t.elems * elem_bytes));
  for (size_t i = 0; i < n; ++i)
    comm_wait(requests[i]);
}

struct step_context;

// One unit's optimizer step on this rank's shard w (fp32) under muon(...):
// AdamW (the nested one's settings) on its parts that are no matrix's, with
// the compacted m and v in state; Muon's updates (muon_update, at their
// places in the shard) applied to the rest. grad_scale: the clip factor over
// the loss scale. runtime/cpu/muon_step.cpp.
void muon_apply_shard(const step_context& c, int unit, float* w, float* state,
                      const void* grad_shard, const float* muon_update, float grad_scale);

// The matrix as muon_orthogonalize sees it, and this step's settings (lr:
// this step's Muon learning rate).
muon_matrix muon_matrix_of(const program_muon_matrix& m);
muon_settings muon_settings_of(const program& p, double lr);
