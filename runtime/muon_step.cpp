// muon_step: the CPU step functions of optimizer = muon(...) (runtime/step.h):
// the owners' gathers and scatters of matrix slices over the shard group, the
// owners' Newton-Schulz, and the optimizer step that applies Muon's updates
// and AdamW to the rest of a shard.
#include <cstring>

#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_math.h"
#include "runtime/step.h"

namespace {

const std::byte* at(const void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<const std::byte*>(base) + elems * elem_bytes;
}
std::byte* at(void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<std::byte*>(base) + elems * elem_bytes;
}

// Where the owner keeps matrix k's gradient in the gathered buffer: after
// the unit's fp32 updates (runtime/muon_layout.h).
void* gathered_grad(void* gathered, const muon_unit_layout& l, const program_muon_matrix& m,
                    int64_t grad_bytes) {
  return at(at(gathered, l.gathered_elems, 4), m.gathered_offset, grad_bytes);
}
float* gathered_update(void* gathered, const program_muon_matrix& m) {
  return static_cast<float*>(gathered) + m.gathered_offset;
}

// Whether the optimizer's gate leaves this step out (runtime/step.cpp's
// step_optimizer decides alike), and the gradients' factor when it does not.
bool skipped(const step_context& c, float& grad_scale) {
  const double norm = step_global_norm(c.grad_norm_partial, c.grad_scale);
  if (optimizer_skips(norm, c.loss_total, c.norm_limit, c.loss_total_limit)) return true;
  grad_scale = static_cast<float>(optimizer_clip_scale(*c.p, norm) / c.grad_scale);
  return false;
}

void wait_all(std::vector<MPI_Request>& requests, size_t n) {
  for (size_t i = 0; i < n; ++i)
    comm_wait(requests[i]);
}

}  // namespace

void step_muon_gather(step_context& c, int unit, const void* grad_shard, void* gathered,
                      MPI_Comm comm) {
  const program& p = *c.p;
  muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  const int64_t g = dtype_size(p.units[unit].grad_shard_dtype);
  size_t n = 0;
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    comm_irecv(comm, at(gathered_grad(gathered, l, m, g), t.matrix_begin, g), t.elems * g, t.peer,
               t.matrix, c.muon->gather_requests[n++]);
  }
  for (const muon_transfer& t : l.to_owners)
    comm_isend(comm, at(grad_shard, t.shard_offset, g), t.elems * g, t.peer, t.matrix,
               c.muon->gather_requests[n++]);
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    std::memcpy(at(gathered_grad(gathered, l, m, g), t.matrix_begin, g),
                at(grad_shard, t.shard_offset, g), static_cast<size_t>(t.elems * g));
  }
  wait_all(c.muon->gather_requests, n);
}

void step_muon_orthogonalize(step_context& c, int unit, const void* grad_shard, void* gathered,
                             float* momentum, void* workspace, float* update_shard) {
  const program& p = *c.p;
  float grad_scale = 1;
  if (skipped(c, grad_scale)) return;
  const muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  const dtype_id gt = p.units[unit].grad_shard_dtype;
  const int64_t g = dtype_size(gt);
  const muon_settings s = muon_settings_of(p, c.lr);
  for (int k : l.owned) {
    const program_muon_matrix& m = p.muon_matrices[k];
    const muon_matrix mm = muon_matrix_of(m);
    // Held whole (a shard group of one): the shard is the flat parameter.
    const void* grad =
        gathered ? gathered_grad(gathered, l, m, g) : at(grad_shard, m.offset_elems, g);
    float* update = gathered ? gathered_update(gathered, m) : update_shard + m.offset_elems;
    muon_orthogonalize(mm, s, momentum + m.momentum_offset, grad, gt, grad_scale, update, workspace,
                       muon_workspace_bytes(m.rows, m.cols));
  }
}

void step_muon_scatter(step_context& c, int unit, const void* gathered, float* update_shard,
                       MPI_Comm comm) {
  const program& p = *c.p;
  muon_unit_layout& l = c.muon->units[static_cast<size_t>(unit)];
  size_t n = 0;
  for (const muon_transfer& t : l.to_owners)
    comm_irecv(comm, update_shard + t.shard_offset, t.elems * 4, t.peer, t.matrix,
               c.muon->scatter_requests[n++]);
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    comm_isend(comm, gathered_update(const_cast<void*>(gathered), m) + t.matrix_begin, t.elems * 4,
               t.peer, t.matrix, c.muon->scatter_requests[n++]);
  }
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    std::memcpy(update_shard + t.shard_offset,
                gathered_update(const_cast<void*>(gathered), m) + t.matrix_begin,
                static_cast<size_t>(t.elems * 4));
  }
  wait_all(c.muon->scatter_requests, n);
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
                      at(grad_shard, part.begin, g), gt, 0, n, adamw_lr,
                      static_cast<float>(o.adamw_beta1), static_cast<float>(o.adamw_beta2),
                      static_cast<float>(o.adamw_eps), static_cast<float>(o.adamw_weight_decay),
                      part.decayed, c.optimizer_step, grad_scale);
    } else {
      const muon_scale k = muon_scale_of(muon_matrix_of(p.muon_matrices[part.matrix]), s);
      muon_apply(w + part.begin, muon_update + part.begin, n, k);
    }
  }
}
