// guard: the window's statistics and its limits.
#include "runtime/train/guard.h"

#include <algorithm>
#include <cmath>

namespace {

// mean + z * standard deviation (population) of the window's values; +inf
// when z is 0.
double limit_of(const std::vector<double>& ring, int64_t count, double z) {
  if (z <= 0) return std::numeric_limits<double>::infinity();
  double mean = 0;
  for (int64_t i = 0; i < count; ++i)
    mean += ring[static_cast<size_t>(i)];
  mean /= static_cast<double>(count);
  double var = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double d = ring[static_cast<size_t>(i)] - mean;
    var += d * d;
  }
  const double sd =
      std::max(std::sqrt(var / static_cast<double>(count)), kGuardMinRelativeStd * std::abs(mean));
  return mean + z * sd;
}

std::vector<double> in_order(const std::vector<double>& ring, int64_t recorded) {
  const int64_t w = static_cast<int64_t>(ring.size());
  std::vector<double> out;
  for (int64_t k = std::max<int64_t>(0, recorded - w); k < recorded; ++k)
    out.push_back(ring[static_cast<size_t>(k % w)]);
  return out;
}

}  // namespace

spike_guard guard_start(const program_guard& g) {
  spike_guard s;
  s.g = g;
  if (g.window > 0) {
    s.losses.assign(static_cast<size_t>(g.window), 0.0);
    s.norms.assign(static_cast<size_t>(g.window), 0.0);
  }
  return s;
}

bool guard_enabled(const spike_guard& s) {
  return (s.g.loss_z > 0 || s.g.norm_z > 0) && s.g.window > 0;
}

guard_limits guard_limits_of(const spike_guard& s) {
  guard_limits l;
  if (!guard_enabled(s) || s.recorded < s.g.window) return l;
  l.loss = limit_of(s.losses, s.g.window, s.g.loss_z);
  l.norm = limit_of(s.norms, s.g.window, s.g.norm_z);
  return l;
}

bool guard_after_step(spike_guard& s, bool applied, bool spike, double loss, double norm) {
  if (!guard_enabled(s)) return false;
  if (applied && std::isfinite(loss) && std::isfinite(norm)) {
    const size_t at = static_cast<size_t>(s.recorded % s.g.window);
    s.losses[at] = loss;
    s.norms[at] = norm;
    ++s.recorded;
    s.skips_in_row = 0;
    return false;
  }
  if (applied) return false;  // fp16: an overflowed loss with finite gradients joins no window
  if (spike) ++s.skips_in_row;
  return s.skips_in_row >= s.g.max_skips;
}

std::vector<double> guard_window_losses(const spike_guard& s) {
  return guard_enabled(s) ? in_order(s.losses, s.recorded) : std::vector<double>{};
}

std::vector<double> guard_window_norms(const spike_guard& s) {
  return guard_enabled(s) ? in_order(s.norms, s.recorded) : std::vector<double>{};
}

void guard_restore(spike_guard& s, const std::vector<double>& losses,
                   const std::vector<double>& norms, int64_t skips_in_row) {
  if (!guard_enabled(s)) return;
  // A checkpoint written with another window: its newest steps that fit.
  const size_t n =
      std::min(losses.size(), static_cast<size_t>(s.g.window));  // sizes equal: checked on reading
  s.recorded = 0;
  for (size_t k = losses.size() - n; k < losses.size(); ++k) {
    const size_t at = static_cast<size_t>(s.recorded % s.g.window);
    s.losses[at] = losses[k];
    s.norms[at] = norms[k];
    ++s.recorded;
  }
  s.skips_in_row = skips_in_row;
}
