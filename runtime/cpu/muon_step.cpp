// muon_step: the CPU step functions of optimizer = muon(...) (runtime/cpu/step.h):
// the owners' gathers and scatters of matrix slices over the shard group, the
// owners' Newton-Schulz, and the optimizer step that applies Muon's updates
// and AdamW to the rest of a shard.
#include <cstring>

#include "runtime/cpu/muon.h"
#include "runtime/cpu/step.h"
#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"

void step_muon_gather(step_context& c, int unit, const void* grad_shard, void* gathered,
                      MPI_Comm comm) {
  const program& p = *c.p;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  const int64_t g = dtype_size(p.units[unit].grad_shard_dtype);
  muon_exchange(
      l, comm, c.muon->gather_requests, g, true,
      [&](const muon_transfer& t) {
        return static_cast<void*>(muon_at(const_cast<void*>(grad_shard), t.shard_offset, g));
      },
      [&](const muon_transfer& t) {
        return static_cast<void*>(muon_at(
            muon_gathered_grad(gathered, l, p.muon_matrices[t.matrix], g), t.matrix_begin, g));
      });
}

void step_muon_orthogonalize(step_context& c, int unit, const void* grad_shard, void* gathered,
                             float* momentum, void* workspace, float* update_shard) {
  const program& p = *c.p;
  float grad_scale = 1;
  if (step_skips(c, grad_scale)) return;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  const dtype_id gt = p.units[unit].grad_shard_dtype;
  const int64_t g = dtype_size(gt);
  const muon_settings s = muon_settings_of(p, c.lr);
  for (int k : l.owned) {
    const program_muon_matrix& m = p.muon_matrices[k];
    const muon_matrix mm = muon_matrix_of(m);
    // Held whole (a shard group of one): the shard is the flat parameter.
    const void* grad = gathered ? muon_gathered_grad(gathered, l, m, g)
                                : static_cast<const void*>(muon_at(grad_shard, m.offset_elems, g));
    float* update = gathered ? muon_gathered_update(gathered, m) : update_shard + m.offset_elems;
    muon_orthogonalize(mm, s, momentum + m.momentum_offset, grad, gt, grad_scale, update, workspace,
                       muon_workspace_bytes(m.rows, m.cols));
  }
}

void step_muon_scatter(step_context& c, int unit, const void* gathered, float* update_shard,
                       MPI_Comm comm) {
  const program& p = *c.p;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  muon_exchange(
      l, comm, c.muon->scatter_requests, 4, false,
      [&](const muon_transfer& t) { return static_cast<void*>(update_shard + t.shard_offset); },
      [&](const muon_transfer& t) {
        return static_cast<void*>(
            muon_gathered_update(const_cast<void*>(gathered), p.muon_matrices[t.matrix]) +
            t.matrix_begin);
      });
}

void muon_apply_shard(const step_context& c, int unit, float* w, float* state,
                      const void* grad_shard, const float* muon_update, float grad_scale) {
  const program& p = *c.p;
  const program_optimizer& o = p.train.optimizer;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  const dtype_id gt = p.units[unit].grad_shard_dtype;
  const int64_t g = dtype_size(gt);
  const muon_settings s = muon_settings_of(p, c.lr);
  // The nested AdamW's lr follows the schedule in proportion to Muon's.
  const float adamw_lr = static_cast<float>(c.lr * o.adamw_lr / o.lr);
  float* m1 = state;
  float* m2 = state + l.state_stride;
  for (const muon_shard_part& part : l.parts) {
    const int64_t n = part.end - part.begin;
    if (part.matrix < 0) {
      optimizer_adamw(w + part.begin, m1 + part.state_offset, m2 + part.state_offset,
                      muon_at(grad_shard, part.begin, g), gt, 0, n, adamw_lr,
                      static_cast<float>(o.adamw_beta1), static_cast<float>(o.adamw_beta2),
                      static_cast<float>(o.adamw_eps), static_cast<float>(o.adamw_weight_decay),
                      part.decayed, c.optimizer_step, grad_scale);
    } else {
      const muon_scale k = muon_scale_of(muon_matrix_of(p.muon_matrices[part.matrix]), s);
      muon_apply(w + part.begin, muon_update + part.begin, n, k);
    }
  }
}
