// muon (CUDA): the device twin of runtime/cpu/muon.h, the same math from
// runtime/muon_math.h. The owner's momentum step and Newton-Schulz iteration
// (GEMMs through cuda_gemm, fp32 without TF32, rounded to bf16 after each
// product when ns_dtype = bf16, as the CPU does), and the shard holder's
// step: Muon's updates on the matrices' slices, AdamW on the rest.
// Everything is enqueued on g.stream; the step's changing values (learning
// rate, step number, loss scale, the skip) are read from g.scalars on the
// device, so that a step captured as a CUDA graph replays with each step's.
// Nothing here allocates or waits. Plain C++ (kernels in muon.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/exec.h"
#include "runtime/muon.h"
#include "runtime/muon_layout.h"

// muon_orthogonalize on the device: momentum (m.elems(), fp32) is updated
// from grad (m.elems() of dtype gt) times the gradient scale of g.scalars
// (the clip factor over the loss scale, clip as the program's train.clip),
// and update (m.elems(), fp32) receives the orthogonalized output in the
// matrix's stored layout. workspace (device) holds at least
// muon_workspace_bytes(m.rows, m.cols), float-aligned. When the step is
// skipped (g.scalars' norm not finite, or the guard trips) the momentum is
// left as it was and update holds nothing of use (the optimizer skips too).
// s.lr is not read. Throws std::runtime_error naming the problem for a bad
// shape, setting or workspace, before anything is enqueued.
void cuda_muon_orthogonalize(const muon_matrix& m, const muon_settings& s, double clip,
                             float* momentum, const void* grad, dtype_id gt, float* update,
                             void* workspace, int64_t workspace_bytes, gpu_exec& g);

// A run of a shard as the device's optimizer kernel reads it (runtime/
// muon_layout.h's muon_shard_part): AdamW's elements (matrix < 0) with their
// m and v at state_offset, or a slice of a Muon matrix whose adjusted
// learning rate is lr_factor times the step's (muon_adjusted_lr is linear in
// lr).
struct gpu_muon_part {
  int64_t begin, end, state_offset;
  double lr_factor;
  int32_t matrix;
  int32_t decayed;
};

// One unit's parts (device array, in shard order, covering the shard) and
// the stride between AdamW's compacted m and v.
struct gpu_muon_unit {
  const gpu_muon_part* parts = nullptr;
  int count = 0;
  int64_t state_stride = 0;
};

// Every unit's tables, in one device allocation made at set-up.
struct gpu_muon_tables {
  std::vector<gpu_muon_unit> units;
  void* device = nullptr;
};

// The parts of one unit of this rank's layout, as the device reads them.
std::vector<gpu_muon_part> gpu_muon_parts_of(const program& p, const muon_unit_layout& l);
// Uploads per-unit parts (synchronously: set-up only); state_strides per unit.
gpu_muon_tables gpu_muon_tables_upload(const std::vector<std::vector<gpu_muon_part>>& parts,
                                       const std::vector<int64_t>& state_strides);
gpu_muon_tables gpu_muon_tables_create(const program& p, const muon_layout& l);
void gpu_muon_tables_destroy(gpu_muon_tables& t);

// The settings of the shard step that do not change from step to step.
struct gpu_muon_apply_args {
  float adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay;
  double adamw_lr_ratio;  // the nested AdamW's lr over Muon's (it follows the schedule)
  double weight_decay;    // Muon's, decoupled, by the unadjusted lr
  double clip;            // the program's train.clip
};
gpu_muon_apply_args gpu_muon_apply_args_of(const program& p);

// runtime/muon_layout.h's muon_apply_shard on the device, for the n
// elements of one unit's shard: w (fp32 master) takes Muon's updates
// (muon_update at the same places) on the matrices' parts and AdamW on the
// rest (m and v compacted in state, v at state + unit.state_stride); then,
// when param is set, w rounded to param_t into it. The learning rate, step
// number and gradient scale come from g.scalars; nothing changes but the
// param copy when the step is skipped.
void cuda_muon_apply_shard(const gpu_muon_unit& unit, int64_t n, float* w, float* state,
                           const void* grad, dtype_id gt, const float* muon_update, void* param,
                           dtype_id param_t, const gpu_muon_apply_args& a, gpu_exec& g);
