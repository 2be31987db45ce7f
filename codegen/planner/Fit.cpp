// Fit: device capacity checks, and the alternatives tune's search finds.
#include "codegen/planner/Fit.h"

#include <algorithm>

#include <fmt/format.h>

#include "codegen/planner/Tune.h"

namespace fsdpgen {
namespace {

// Candidates fitting_alternatives takes from each search, before it drops
// those that only add changes to one it gave.
constexpr int64_t kAlternativesSearched = 2 * kAlternatives;

}  // namespace

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
                      (hw.gpu && spec.model.head_dim() <= kCudaAttentionFlashMaxHeadSize);
  // 16-bit flash attention (gpt2's packed, llama's grouped-query) may run on
  // cuDNN (runtime/cuda/cudnn_attention.h), whose backward needs workspace.
  o.cudnn_attention_workspace = o.flash_attention && spec.parallel.precision.param != DType::FP32 &&
                                spec.model.head_dim() % kCudnnAttentionHeadSizeMultiple == 0 &&
                                spec.model.head_dim() <= kCudnnAttentionMaxHeadSize;
  if (hw.gpu)
    o.gemm_workspace_bytes = int64_t{32} << 20;  // cuBLASLt's recommended workspace on Hopper
  else if (spec.parallel.precision.param != DType::FP32)
    o.gemm_workspace_bytes = kCpuGemmWorkspaceBytes;
  return o;
}

std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw) {
  const int64_t global = spec.global_batch();
  std::vector<Alternative> out;
  std::vector<std::vector<std::string>> given;  // each row's changes, sorted
  // A candidate that only adds changes to a row already given (as fast or
  // faster) is not another piece of advice.
  auto add = [&](const TuneCandidate& c) {
    std::vector<std::string> changes = c.changes;
    std::sort(changes.begin(), changes.end());
    for (const auto& g : given)
      if (std::includes(changes.begin(), changes.end(), g.begin(), g.end())) return;
    given.push_back(changes);
    const int64_t batch = c.spec.global_batch();
    out.push_back({fmt::format("{}", fmt::join(c.changes, ", ")), c.device_bytes, c.host_bytes,
                   c.step_ms, c.tokens_per_s_per_gpu, batch, batch != global});
  };
  TuneOptions o;
  o.top = kAlternativesSearched;
  // The reduce dtype is a numerics choice and prefetch a speed one: neither
  // is how a plan is made to fit (tune varies them).
  o.keep = {"precision", "prefetch"};
  for (const TuneCandidate& c : tune(spec, hw, o).top)
    if (out.size() < static_cast<size_t>(kAlternatives)) add(c);
  if (out.empty()) {
    o.allow_batch_change = true;
    for (const TuneCandidate& c : tune(spec, hw, o).top)
      if (c.batch_changed && out.size() < static_cast<size_t>(kAlternatives)) add(c);
  }
  return out;
}

}  // namespace fsdpgen
