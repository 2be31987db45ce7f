// step: the runtime side of the generated ops' vocabulary.
#include "runtime/cpu/step.h"

#include <cmath>
#include <cstring>

#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_math.h"

void step_add_losses(step_context& c, const float* losses, int64_t n) {
  if (c.eval_losses) std::memcpy(c.eval_losses, losses, static_cast<size_t>(n) * sizeof(float));
  n = step_counted_losses(c, n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += losses[i];
  c.loss_sum += c.validation_pass < 0 ? s * c.inject_loss_factor : s;
}

void tensor_convert(void* dst, dtype_id dst_t, const void* src, dtype_id src_t, int64_t n,
                    bool accumulate) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float v = dtype_load(src, src_t, i);
    dtype_store(dst, dst_t, i, accumulate ? dtype_load(dst, dst_t, i) + v : v);
  }
}

void tensor_zero(void* dst, int64_t bytes) {
  std::memset(dst, 0, static_cast<size_t>(bytes));
}

void tensor_narrow_in_place(void* data, int64_t n, dtype_id to) {
  // Element i moves from byte 4i to byte 2i: in increasing order every
  // write lands on bytes already read.
  const float* f = static_cast<const float*>(data);
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, f + i, 4);
    dtype_store(data, to, i, v);
  }
}

void tensor_widen_in_place(void* data, int64_t n, dtype_id from) {
  float* f = static_cast<float*>(data);
  for (int64_t i = n; i-- > 0;) {
    const float v = dtype_load(data, from, i);
    std::memcpy(f + i, &v, 4);
  }
}

void step_add_grad_norm(step_context& c, const void* grad, dtype_id t, int64_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const double v = dtype_load(grad, t, i);
    s += v * v;
  }
  c.grad_norm_partial += static_cast<float>(s);
}

void step_reduce_loss(step_context& c, MPI_Comm comm) {
  c.loss_total = static_cast<float>(c.loss_sum);
  comm_all_reduce(comm, &c.loss_total, &c.loss_total, 1, dtype_id::fp32);
}

namespace {

// AdamW or SGD over the whole shard w, decayed ranges and undecayed gaps
// alternating over [0, n).
void adamw_or_sgd(const step_context& c, int unit, float* w, float* state, const void* grad_shard,
                  float scale) {
  const program& p = *c.p;
  const program_unit& u = p.units[unit];
  const int64_t n = u.shard_elems;
  const float lr = static_cast<float>(c.lr);
  const int64_t* ranges = c.decay_ranges[unit];
  const int count = c.decay_range_counts[unit];
  int64_t pos = 0;
  for (int r = 0; r <= count; ++r) {
    int64_t begin = r < count ? ranges[2 * r] : n;
    for (int decayed = 0; decayed < 2; ++decayed) {
      int64_t from = decayed ? begin : pos;
      int64_t to = decayed ? (r < count ? ranges[2 * r + 1] : n) : begin;
      if (from >= to) continue;
      if (p.train.optimizer.kind == optimizer_kind::adamw)
        optimizer_adamw(
            w, state, state + n, grad_shard, u.grad_shard_dtype, from, to, lr,
            static_cast<float>(p.train.optimizer.beta1),
            static_cast<float>(p.train.optimizer.beta2), static_cast<float>(p.train.optimizer.eps),
            static_cast<float>(p.train.optimizer.weight_decay), decayed, c.optimizer_step, scale);
      else
        optimizer_sgd(w, p.train.optimizer.momentum > 0 ? state : nullptr, grad_shard,
                      u.grad_shard_dtype, from, to, lr,
                      static_cast<float>(p.train.optimizer.momentum),
                      static_cast<float>(p.train.optimizer.weight_decay), decayed,
                      c.optimizer_step == 1, scale);
    }
    if (r < count) pos = ranges[2 * r + 1];
  }
}

}  // namespace

bool step_skips(const step_context& c, float& grad_scale) {
  const double norm = step_global_norm(c.grad_norm_partial, c.grad_scale);
  if (optimizer_skips(norm, c.loss_total, c.norm_limit, c.loss_total_limit)) return true;
  grad_scale = static_cast<float>(optimizer_clip_scale(*c.p, norm) / c.grad_scale);
  return false;
}

void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, const float* muon_update) {
  const program& p = *c.p;
  const int64_t n = p.units[unit].shard_elems;
  float* w = master ? master : static_cast<float*>(param_shard);
  float scale = 1;
  if (step_skips(c, scale)) return;  // skipped: nothing changes
  if (p.train.optimizer.kind == optimizer_kind::muon)
    muon_apply_shard(c, unit, w, state, grad_shard, muon_update, scale);
  else
    adamw_or_sgd(c, unit, w, state, grad_shard, scale);
  if (master)
    tensor_convert(param_shard, p.parallel.precision.param, master, dtype_id::fp32, n, false);
}
