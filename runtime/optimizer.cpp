// optimizer: lr schedules, AdamW and SGD over shard ranges.
#include "runtime/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/init.h"
#include "runtime/optimizer_math.h"

int64_t optimizer_warmup(const program& p, int64_t total_steps) {
  return std::min(p.train.lr_schedule.warmup, std::max<int64_t>(total_steps, 0));
}

double optimizer_lr(const program& p, int64_t step, int64_t total_steps) {
  const int64_t warmup = optimizer_warmup(p, total_steps);
  if (step < warmup)
    return p.train.optimizer.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (p.train.lr_schedule.kind == lr_schedule_kind::constant) return p.train.optimizer.lr;
  int64_t span = total_steps - 1 - warmup;
  double ratio = span > 0 ? std::min(1.0, static_cast<double>(step - warmup) / span) : 1.0;
  double coeff = p.train.lr_schedule.kind == lr_schedule_kind::cosine
                     ? 0.5 * (1.0 + std::cos(M_PI * ratio))
                     : 1.0 - ratio;
  return p.train.lr_schedule.min_lr + coeff * (p.train.optimizer.lr - p.train.lr_schedule.min_lr);
}

namespace {

// Muon's nested AdamW (the parameters that are no Muon matrix): its peak and
// floor, in proportion to Muon's; "" for the other optimizers.
std::string nested_adamw_describe(const program& p, bool decays) {
  const program_optimizer& o = p.train.optimizer;
  if (o.kind != optimizer_kind::muon) return "";
  if (!decays) return fmt::format("; nested AdamW: {:g}", o.adamw_lr);
  return fmt::format("; nested AdamW: {:g} down to {:g}", o.adamw_lr,
                     p.train.lr_schedule.min_lr * o.adamw_lr / o.lr);
}

// The optimizer's own lr (Muon's, under Muon) over the run.
std::string schedule_describe(const program& p, int64_t total_steps) {
  const int64_t steps = optimizer_warmup(p, total_steps);
  const std::string clamped =
      steps < p.train.lr_schedule.warmup
          ? fmt::format(" (the spec's {}, clamped to the run)", p.train.lr_schedule.warmup)
          : "";
  const std::string warmup = steps > 0
                                 ? fmt::format("{} warm-up step{}{} to {:g}", steps,
                                               steps == 1 ? "" : "s", clamped, p.train.optimizer.lr)
                                 : fmt::format("{:g}", p.train.optimizer.lr);
  if (steps >= total_steps) return warmup + ", the whole run";
  if (p.train.lr_schedule.kind == lr_schedule_kind::constant) return warmup + ", then constant";
  return fmt::format("{}, then {} down to {:g} at step {}, the last", warmup,
                     p.train.lr_schedule.kind == lr_schedule_kind::cosine ? "cosine" : "linear",
                     p.train.lr_schedule.min_lr, total_steps);
}

}  // namespace

std::string optimizer_lr_describe(const program& p, int64_t total_steps) {
  const bool decays = optimizer_warmup(p, total_steps) < total_steps &&
                      p.train.lr_schedule.kind != lr_schedule_kind::constant;
  return schedule_describe(p, total_steps) + nested_adamw_describe(p, decays);
}

std::string optimizer_warmup_note(const program& p, int64_t steps) {
  if (steps <= 0 || p.train.lr_schedule.warmup <= steps) return "";
  return fmt::format(
      "--steps {}: the run is shorter than the spec's warmup ({} steps); the warm-up is clamped "
      "to the run's {} steps, reaching lr {:g} at its last step",
      steps, p.train.lr_schedule.warmup, steps, p.train.optimizer.lr);
}

float optimizer_clip_scale(const program& p, double norm) {
  if (p.train.clip <= 0) return 1.0f;
  return static_cast<float>(std::min(1.0, p.train.clip / (norm + 1e-6)));
}

void optimizer_adamw(float* master, float* m, float* v, const void* grad, dtype_id g, int64_t begin,
                     int64_t end, float lr, float beta1, float beta2, float eps, float weight_decay,
                     bool decay, int64_t t, float grad_scale) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  const float wd = decay ? weight_decay : 0.0f;
#pragma omp parallel for schedule(static) if (end - begin > 65536)
  for (int64_t i = begin; i < end; ++i)
    adamw_update(master[i], m[i], v[i], dtype_load(grad, g, i) * grad_scale, lr, beta1, beta2, c1,
                 c2, eps, wd);
}

void optimizer_sgd(float* master, float* momentum_buf, const void* grad, dtype_id g, int64_t begin,
                   int64_t end, float lr, float momentum, float weight_decay, bool decay,
                   bool first_step, float grad_scale) {
  const float wd = decay ? weight_decay : 0.0f;
#pragma omp parallel for schedule(static) if (end - begin > 65536)
  for (int64_t i = begin; i < end; ++i)
    sgd_update(master[i], momentum_buf ? &momentum_buf[i] : nullptr,
               dtype_load(grad, g, i) * grad_scale, lr, momentum, wd, first_step);
}

optimizer_decay_table optimizer_decay_ranges(const program& p, int64_t shard_rank) {
  optimizer_decay_table d;
  d.ranges.resize(static_cast<size_t>(p.unit_count));
  for (int i = 0; i < p.tensor_count; ++i) {
    const program_tensor& t = p.tensors[i];
    if (!init_tensor_decays(t)) continue;
    shard_piece piece;
    if (!shard_piece_of(t, p.units[t.unit].shard_elems, shard_rank, piece)) continue;
    std::vector<int64_t>& r = d.ranges[static_cast<size_t>(t.unit)];
    r.push_back(piece.shard_offset);
    r.push_back(piece.shard_offset + piece.tensor_end - piece.tensor_begin);
  }
  for (auto& r : d.ranges) {
    d.pointers.push_back(r.data());
    d.counts.push_back(static_cast<int>(r.size() / 2));
  }
  return d;
}
