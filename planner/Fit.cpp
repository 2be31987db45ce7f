// Fit: device capacity checks and the search over single changes.
#include "planner/Fit.h"

#include "dsl/Units.h"

#include <algorithm>

#include <fmt/format.h>

#include "planner/Activations.h"

namespace fsdpgen {

int64_t reserved_bytes(const Hardware& hw) {
  return hw.gpu ? int64_t{2} << 30 : 0;
}

int64_t usable_bytes(const Hardware& hw) {
  return hw.memory_bytes - reserved_bytes(hw);
}

int64_t usable_host_bytes(const Hardware& hw) {
  return hw.gpu ? hw.host_memory_bytes - hw.host_memory_bytes / 10 : usable_bytes(hw);
}

bool plan_fits(const MemoryPlan& m, const Hardware& hw) {
  if (!hw.gpu) return m.device_arena_bytes + m.host_arena_bytes <= usable_bytes(hw);
  return m.device_arena_bytes <= usable_bytes(hw) && m.host_arena_bytes <= usable_host_bytes(hw);
}

ScheduleOptions schedule_options_for(const Hardware& hw, const Spec& spec) {
  ScheduleOptions o;
  // GPUs run attention as fused flash kernels (runtime/cuda/attention.h), so
  // their plans save log-sum-exp instead of the T x T probabilities, for head
  // sizes the kernels take; the CPU runtime's gpt2 attention is faster as
  // GEMMs over materialized probabilities. llama's grouped-query attention
  // has only the flash form, on both (runtime/attention_gqa.h).
  o.flash_attention = spec.model.family == Family::Llama ||
                      (hw.gpu && spec.model.head_dim() <= kGpuFlashMaxHeadDim);
  // 16-bit flash attention (gpt2's packed, llama's grouped-query) may run on
  // cuDNN (runtime/cuda/cudnn_attention.h), whose backward needs workspace.
  o.cudnn_attention_workspace = o.flash_attention && spec.parallel.precision.param != DType::FP32 &&
                                spec.model.head_dim() % kGpuCudnnHeadDimMultiple == 0 &&
                                spec.model.head_dim() <= kGpuCudnnMaxHeadDim;
  if (hw.gpu)
    o.gemm_workspace_bytes = int64_t{32} << 20;  // cuBLASLt's recommended workspace on Hopper
  else if (spec.parallel.precision.param != DType::FP32)
    o.gemm_workspace_bytes = kCpuGemmWorkspaceBytes;
  return o;
}

PlanResult plan_for(const Spec& spec, const Hardware& hw) {
  PlanResult r;
  r.units = lower(spec);
  r.schedule = build_schedule(r.units, schedule_options_for(hw, spec));
  r.memory = plan_memory(r.schedule);
  r.timeline = predict(r.schedule, hw);
  r.fits = plan_fits(r.memory, hw);
  return r;
}

namespace {

Spec with_world(Spec s, int64_t world) {
  ParallelSpec& p = s.parallel;
  int64_t nodes_of = p.ranks_per_node;
  p.world = world;
  p.ranks_per_node = std::min(nodes_of, world);
  if (!is_hybrid(p.sharding)) p.shard_group = non_hybrid_shard_group(p.sharding, world);
  return s;
}

}  // namespace

std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw) {
  std::vector<std::pair<std::string, Spec>> tries;
  auto add = [&](std::string change, Spec s) {
    tries.push_back({std::move(change), std::move(s)});
  };
  const bool recomputing = spec.parallel.recompute == Recompute::Block;
  std::vector<std::pair<std::string, Spec>> bases = {{"", spec}};
  if (!recomputing) {
    Spec s = spec;
    s.parallel.recompute = Recompute::Block;
    add("recompute = block", s);
    bases.push_back({"recompute = block, ", s});
  }
  for (auto& [prefix, base] : bases) {
    for (int64_t b = base.train.micro_batch / 2; b >= 1; b /= 2) {
      Spec s = base;
      s.train.micro_batch = b;
      add(fmt::format("{}micro_batch = {}", prefix, b), s);
    }
    if (!is_hybrid(base.parallel.sharding) && base.parallel.sharding != Sharding::NoShard)
      for (int64_t w = base.parallel.world * 2; w <= base.parallel.world * 8; w *= 2)
        add(fmt::format("{}world = {}", prefix, w), with_world(base, w));
    if (base.parallel.offload == Offload::None && base.parallel.sharding != Sharding::NoShard) {
      Spec s = base;
      s.parallel.offload = Offload::Cpu;
      add(fmt::format("{}offload = cpu", prefix), s);
    }
    // Sub-block units: one linear gathered at a time instead of a block,
    // alone and with everything the 1T blog offloaded.
    if (base.units.policy != UnitPolicy::EachLinear &&
        base.parallel.sharding != Sharding::NoShard) {
      Spec s = base;
      s.units = policy_units(s.model, UnitPolicy::EachLinear);
      add(fmt::format("{}units {{ each linear }}", prefix), s);
      if (s.parallel.recompute == Recompute::Block) {
        s.parallel.offload = Offload::Cpu;
        s.parallel.offload_activations = true;
        add(fmt::format("{}units {{ each linear }}, offload {{ params = cpu  activations = cpu }}",
                        prefix),
            s);
      }
    }
    // The checkpointed activations wait on the host (with recompute only).
    if (base.parallel.recompute == Recompute::Block && !base.parallel.offload_activations) {
      Spec s = base;
      s.parallel.offload_activations = true;
      add(fmt::format("{}offload {{ params = {}  activations = cpu }}", prefix,
                      to_string(s.parallel.offload)),
          s);
      if (s.parallel.offload == Offload::None && s.parallel.sharding != Sharding::NoShard) {
        s.parallel.offload = Offload::Cpu;
        add(fmt::format("{}offload {{ params = cpu  activations = cpu }}", prefix), s);
      }
    }
  }
  std::vector<Alternative> out;
  for (auto& [change, s] : tries) {
    if (!activations_size_error(s, schedule_options_for(hw, s).flash_attention).empty()) continue;
    PlanResult r = plan_for(s, hw);
    if (!r.fits) continue;
    out.push_back({change, r.memory.device_arena_bytes, r.memory.host_arena_bytes,
                   r.timeline.step_ms, r.timeline.tokens_per_s, true});
  }
  std::stable_sort(out.begin(), out.end(), [](const Alternative& a, const Alternative& b) {
    return a.tokens_per_s > b.tokens_per_s;
  });
  if (out.size() > 6) out.resize(6);
  return out;
}

}  // namespace fsdpgen
