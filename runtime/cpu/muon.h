// muon: the Muon optimizer (torch.optim.Muon) on whole fp32 matrices, CPU.
// Under FSDP a matrix's owner rank gathers its reduced gradient, keeps its
// momentum, and orthogonalizes (muon_orthogonalize); every rank whose shard
// holds part of the matrix then applies the update to that part (muon_apply).
// muon_step does both for a matrix held whole (no_shard, world 1, tests).
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/muon.h"

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
