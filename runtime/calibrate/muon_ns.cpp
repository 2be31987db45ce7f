// muon_ns: a random (rows, cols) gradient orthogonalized, the momentum
// carried from run to run as in training.
#include "runtime/calibrate/muon_ns.h"

#include <random>

measurement measure_muon_ns(const fsdpgen::profile::MuonNsTime& e, const measure_options& o) {
  std::mt19937 rng(1234);
  const muon_matrix m{e.rows, e.cols, false};
  const muon_settings s = muon_ns_settings(e);
  host_buffer grad(m.elems() * 4), momentum(m.elems() * 4), update(m.elems() * 4);
  fill_normal(grad.data(), dtype_id::fp32, m.elems(), 1e-3f, rng);
  const int64_t workspace_bytes = muon_workspace_bytes(m.rows, m.cols);
  host_buffer workspace(workspace_bytes);
  return measure(o, [&] {
    return seconds_of([&] {
      muon_orthogonalize(m, s, momentum.as<float>(), grad.data(), dtype_id::fp32, 1.0f,
                         update.as<float>(), workspace.data(), workspace_bytes);
    });
  });
}
