// muon_tables (CUDA): this rank's Muon shard parts (runtime/muon_layout.h),
// copied to the device once at set-up, and the shard step's fixed settings.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <stdexcept>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/muon.h"

std::vector<gpu_muon_part> gpu_muon_parts_of(const program& p, const muon_unit_layout& l) {
  std::vector<gpu_muon_part> out;
  out.reserve(l.parts.size());
  for (const muon_shard_part& part : l.parts) {
    gpu_muon_part d{part.begin, part.end, part.state_offset, 0.0, part.matrix, part.decayed};
    if (part.matrix >= 0) {
      const muon_matrix m = muon_matrix_of(p.muon_matrices[part.matrix]);
      d.lr_factor = muon_adjusted_lr(1.0, p.train.optimizer.adjust_lr, m.fan_out(), m.fan_in());
    }
    out.push_back(d);
  }
  return out;
}

gpu_muon_tables gpu_muon_tables_upload(const std::vector<std::vector<gpu_muon_part>>& parts,
                                       const std::vector<int64_t>& state_strides) {
  if (parts.size() != state_strides.size())
    throw std::invalid_argument(
        fmt::format("gpu_muon_tables_upload: {} units of parts but {} state strides", parts.size(),
                    state_strides.size()));
  size_t total = 0;
  for (size_t u = 0; u < parts.size(); ++u) {
    int64_t pos = 0;
    for (const gpu_muon_part& part : parts[u]) {  // the kernel's search relies on this
      if (part.begin != pos || part.end <= part.begin)
        throw std::invalid_argument(fmt::format(
            "gpu_muon_tables_upload: unit {}: the parts do not cover the shard in order (a part "
            "[{}, {}) where {} was next)",
            u, part.begin, part.end, pos));
      pos = part.end;
    }
    total += parts[u].size();
  }
  gpu_muon_tables t;
  t.units.resize(parts.size());
  if (total == 0) return t;
  CUDA_CHECK(cudaMalloc(&t.device, total * sizeof(gpu_muon_part)));
  auto* at = static_cast<gpu_muon_part*>(t.device);
  for (size_t u = 0; u < parts.size(); ++u) {
    const size_t count = parts[u].size();
    if (count > 0)
      CUDA_CHECK(
          cudaMemcpy(at, parts[u].data(), count * sizeof(gpu_muon_part), cudaMemcpyHostToDevice));
    t.units[u] = {at, static_cast<int>(count), state_strides[u]};
    at += count;
  }
  return t;
}

gpu_muon_tables gpu_muon_tables_create(const program& p, const muon_layout& l) {
  std::vector<std::vector<gpu_muon_part>> parts;
  std::vector<int64_t> strides;
  for (const muon_unit_layout& u : l.units) {
    parts.push_back(gpu_muon_parts_of(p, u));
    strides.push_back(u.state_stride);
  }
  return gpu_muon_tables_upload(parts, strides);
}

void gpu_muon_tables_destroy(gpu_muon_tables& t) {
  if (t.device) cudaFree(t.device);
  t.device = nullptr;
  t.units.clear();
}

gpu_muon_apply_args gpu_muon_apply_args_of(const program& p) {
  const program_optimizer& o = p.train.optimizer;
  return {static_cast<float>(o.adamw_beta1),
          static_cast<float>(o.adamw_beta2),
          static_cast<float>(o.adamw_eps),
          static_cast<float>(o.adamw_weight_decay),
          o.adamw_lr / o.lr,
          o.weight_decay,
          p.train.clip};
}
