// Muon: which rank of a unit's shard group orthogonalizes each Muon matrix
// (its owner, runtime/cpu/muon.h's muon_orthogonalize), and which slice of the
// matrix each rank's flat shard holds: what the owner gathers (the reduced
// gradient) and scatters back (the update) for muon_apply. Pure: the
// schedule, the memory plan and the cost model read its answer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpgen {

struct Units;

// One Muon matrix of a unit: a parameter tensor as the flat parameter stores
// it, row-major (GPT-2's c_attn is one matrix, not three).
struct MuonMatrix {
  std::string name;
  int64_t rows = 0, cols = 0;
  int64_t offset_elems = 0;  // in the unit's unsharded flat parameter (FlatTensor::offset_elems)
  // Stored (in, out), as GPT-2's Conv1D weights are; torch's nn.Linear (and
  // torch.optim.Muon's learning-rate rules) read (out, in).
  bool stored_transposed = false;
  int64_t elems() const { return rows * cols; }
};

// The part of a matrix in one rank's shard: elements [begin, end) of the
// matrix (row-major), at shard_offset in that rank's shard.
struct MuonSlice {
  int64_t rank = 0;  // in the shard group
  int64_t begin = 0, end = 0;
  int64_t shard_offset = 0;
  bool operator==(const MuonSlice&) const = default;
};

struct MuonOwner {
  int64_t owner = 0;              // rank in the shard group
  double ns_flops = 0;            // muon_ns_flops of the matrix
  std::vector<MuonSlice> slices;  // in rank order, none empty, covering [0, elems) once
  // Where the owner keeps it (plan_muon): its momentum, in elements into the
  // owner's momentum of every unit; its gradient and update, in elements
  // into the owner's gathered matrices of this unit (in matrix order).
  int64_t momentum_offset = 0;
  int64_t gathered_offset = 0;
};

struct MuonAssignment {
  std::vector<MuonOwner> matrices;  // in the order of the input
  std::vector<double> rank_flops;   // Newton-Schulz FLOPs per rank, the prior loads included
};

// FLOPs of ns_steps Newton-Schulz iterations on a (rows, cols) matrix, 2 per
// multiply-add (codegen/planner/Flops.h's convention): with m = min(rows, cols) and
// n = max, each iteration is X X^T (2 m^2 n), A A (2 m^3) and B X (2 m^2 n).
double muon_ns_flops(int64_t rows, int64_t cols, int64_t ns_steps);

// Assigns each matrix of a unit an owner among the shard group's
// `shard_group` ranks, whose shards are `shard_elems` each (FlatUnit's:
// rank r holds [r * shard_elems, (r + 1) * shard_elems) of the flat
// parameter, shard padding at the end), balancing Newton-Schulz FLOPs:
// largest first, each to the least loaded rank, ties to the rank holding most
// of the matrix (less to gather), then the lowest rank. prior_flops (empty,
// or one per rank) carries the loads of units assigned before, so that
// balance holds across the model too; with zero priors the loads end within
// the largest matrix's FLOPs of each other. Deterministic. shard_group 1
// (no_shard, world 1) owns everything locally.
//
// Throws std::invalid_argument naming the matrix for a matrix with a side
// below 1, one outside the unit's padded flat parameter, or two that overlap;
// and for a shard group below 1, ns_steps below 0 or prior_flops of another
// length.
MuonAssignment assign_muon_owners(const std::vector<MuonMatrix>& matrices, int64_t shard_elems,
                                  int64_t shard_group, int64_t ns_steps,
                                  const std::vector<double>& prior_flops = {});

// The assignment in words, one matrix a line: "c_attn (128, 384) owner 1,
// 0.31 GFLOP, slices r0 [0, 20000) r1 [20000, 49152)", then the loads.
std::string print_muon_assignment(const std::vector<MuonMatrix>& matrices, const MuonAssignment& a);

// The Muon matrices of unit `unit`, in flat order: the weights of its
// blocks' linear pieces (runtime/model/layout.h's Piece: the attention and MLP
// projections, torch.optim.Muon's hidden matrices), with their orientation.
// Embeddings, the head, norms and biases stay with AdamW, and so do custom
// layers' parameters but the matrices their headers give Muon (Param's
// Optimizer "muon(out, in)" or "muon(in, out)", layers/fsdpgen_layer.h).
std::vector<MuonMatrix> muon_matrices(const Units& units, int unit);

// Every unit's matrices and their owners among the shard group's ranks,
// assigned unit by unit in backward order (the order their gradients are
// reduced), each unit's loads carried into the next so that the balance holds
// across the model. Indexed by unit; a unit without matrices has none.
struct MuonPlan {
  std::vector<std::vector<MuonMatrix>> matrices;
  std::vector<MuonAssignment> owners;
};
MuonPlan plan_muon(const Units& units, int64_t ns_steps);

// What Muon adds to a rank's memory, the most any rank of the shard group
// needs (every rank's arena is planned alike): the fp32 momentum of the
// matrices it owns (persistent), one Newton-Schulz workspace for its largest
// matrix (runtime/muon_math.h's muon_workspace_bytes), and, when the shard
// group has more than one rank, the matrices of one unit it owns gathered
// whole (muon_unit's gathered_elems at grad_bytes + 4 bytes each: the reduced
// gradient in the grad shard's dtype, then the fp32 update). A shard group of
// one reads its gradients in place.
struct MuonMemory {
  int64_t momentum_bytes = 0;
  int64_t gathered_bytes = 0;
  int64_t workspace_bytes = 0;
};
MuonMemory muon_memory(const MuonPlan& plan, int64_t shard_group, int64_t grad_bytes);

// One unit's Muon work, the most any rank of the shard group does (the
// schedule and the arena are alike on every rank).
struct MuonUnit {
  int64_t gathered_elems = 0;   // matrix elements one rank owns
  int64_t exchanged_elems = 0;  // elements one rank sends or receives in the gather (or scatter)
  int64_t adamw_elems = 0;      // elements of one rank's shard that are no Muon matrix's: its
                                // compacted AdamW state (runtime/cpu/muon.h's muon_shard_parts)
  double ns_flops = 0;          // Newton-Schulz FLOPs of the busiest owner
};
MuonUnit muon_unit(const MuonPlan& plan, int unit, int64_t shard_elems, int64_t shard_group);

}  // namespace fsdpgen
