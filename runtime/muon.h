// muon: the Muon optimizer (torch.optim.Muon) on whole fp32 matrices, CPU.
// Under FSDP a matrix's owner rank gathers its reduced gradient, keeps its
// momentum, and orthogonalizes (muon_orthogonalize); every rank whose shard
// holds part of the matrix then applies the update to that part (muon_apply).
// muon_step does both for a matrix held whole (no_shard, world 1, tests).
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/muon_math.h"

struct muon_settings {
  double lr = 0.02;  // this step's, before the shape adjustment
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;                    // Newton-Schulz iterations, 0..kMaxMuonNsSteps (limits.h)
  dtype_id ns_dtype = dtype_id::fp32;  // fp32, or bf16: iterates rounded as torch does
  double weight_decay = 0.0;           // decoupled, by the unadjusted lr
  muon_adjust adjust = muon_adjust::original;
};

// A matrix as the flat parameter stores it, row-major (rows, cols).
// stored_transposed: stored as (in_features, out_features) (GPT-2's Conv1D)
// rather than as nn.Linear's (out, in); only the lr adjustment reads the
// orientation, since the iteration commutes with transposition.
struct muon_matrix {
  int64_t rows = 0, cols = 0;
  bool stored_transposed = false;
  int64_t elems() const { return rows * cols; }
  int64_t fan_out() const { return stored_transposed ? cols : rows; }
  int64_t fan_in() const { return stored_transposed ? rows : cols; }
};

// The owner's part. momentum (m.elems(), fp32) is updated from grad
// (m.elems() of dtype g, each times grad_scale: the clip factor), and
// update (m.elems(), fp32) receives the orthogonalized Newton-Schulz output,
// in the matrix's stored layout. workspace holds at least
// muon_workspace_bytes(m.rows, m.cols), float-aligned; nothing is allocated.
// Throws std::runtime_error naming the problem for a bad shape, setting
// or workspace.
void muon_orthogonalize(const muon_matrix& m, const muon_settings& s, float* momentum,
                        const void* grad, dtype_id g, float grad_scale, float* update,
                        void* workspace, int64_t workspace_bytes);

// The per-matrix factors of muon_apply: float(1 - lr * weight_decay) and the
// adjusted lr (muon_adjusted_lr) rounded to fp32, as torch rounds them.
struct muon_scale {
  float decay = 1.0f;
  float adjusted_lr = 0.0f;
};
muon_scale muon_scale_of(const muon_matrix& m, const muon_settings& s);

// The shard holder's part: master[i] for i in [0, elems) takes the update
// update[i] (the matching elements of muon_orthogonalize's output).
void muon_apply(float* master, const float* update, int64_t elems, const muon_scale& k);

// Both, for a matrix held whole: master (m.elems(), fp32) takes one Muon step.
void muon_step(const muon_matrix& m, const muon_settings& s, float* master, float* momentum,
               const void* grad, dtype_id g, float grad_scale, float* update, void* workspace,
               int64_t workspace_bytes);
