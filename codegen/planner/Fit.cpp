// Fit: device capacity checks and the schedule options a device implies.
#include "codegen/planner/Fit.h"

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

}  // namespace fsdpgen
