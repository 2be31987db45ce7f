// TargetSupport: the rules, one function per feature a backend lacks.
#include "codegen/planner/TargetSupport.h"

#include <algorithm>

#include <fmt/format.h>

#include "codegen/planner/Fit.h"
#include "runtime/dtype_pairs.h"
#include "runtime/limits.h"

namespace fsdpgen {
namespace {

using Reasons = std::vector<std::string>;

// Why a feature of unrun_features is refused: its CUDA code is written,
// built and compared with its CPU twin by tests that need a GPU (docs/gpu.md,
// "Waiting for a GPU"), and none has run them yet. The checks of those
// features (check_qkv_bias to check_softcaps, for GPUs only) name the
// feature alone.
constexpr std::string_view kTwinNotRun =
    "the CPU target has it; its CUDA twin has not run on a GPU yet: --allow-unrun builds it";

// llama's grouped-query attention runs on the CUDA flash kernels, which
// take heads of at most kCudaAttentionFlashMaxHeadSize.
void check_family(const Spec& spec, const Hardware& hw, Reasons& out) {
  if (spec.model.family == Family::Gpt2 || !hw.gpu ||
      spec.model.head_dim() <= kCudaAttentionFlashMaxHeadSize)
    return;
  out.push_back(fmt::format(
      "model family {} with head size {}: the CUDA grouped-query attention kernels take heads of "
      "at most {}",
      to_string(spec.model.family), spec.model.head_dim(), kCudaAttentionFlashMaxHeadSize));
}

// gpt2's LayerNorm kernels have their epsilon built in; llama's RMSNorm takes the spec's.
void check_norm_eps(const Spec& spec, Reasons& out) {
  if (spec.model.family == Family::Gpt2 && spec.model.norm_eps != 1e-5)
    out.push_back(
        fmt::format("norm_eps = {} (gpt2's LayerNorm kernels use 1e-5)", spec.model.norm_eps));
}

// The runtimes' kernels take gradients (reduced in `reduce`) of the pairs
// runtime/dtype_pairs.h lists: fp32 or the params' own type.
void check_half_mix(const Spec& spec, Reasons& out) {
  const PrecisionSpec& p = spec.parallel.precision;
  if (!has_dtype_pair(to_string(p.param), to_string(p.reduce)))
    out.push_back(fmt::format(
        "param = {} with reduce = {} (mixing bf16 and fp16 is not supported: make reduce fp32 "
        "or the same type as param)",
        to_string(p.param), to_string(p.reduce)));
}

void check_master(const Spec& spec, Reasons& out) {
  if (spec.parallel.precision.master != DType::FP32) out.push_back("master weights must be fp32");
}

bool has_layer(const UnitSpec& unit, LayerId::Kind kind) {
  return std::any_of(unit.layers.begin(), unit.layers.end(),
                     [&](const LayerId& l) { return l.kind == kind; });
}

// The loss kernel reads the final norm's output from the head's own segment.
void check_final_norm_with_head(const Spec& spec, Reasons& out) {
  for (const UnitSpec& unit : spec.units.units)
    if (has_layer(unit, LayerId::Kind::FinalNorm) && !has_layer(unit, LayerId::Kind::Head))
      out.push_back("final_norm and head must be in the same wrap unit");
}

// 16-bit activations of an odd number of tokens would leave the next fp32
// slot 2 bytes off a 4-byte boundary.
void check_slot_alignment(const Spec& spec, Reasons& out) {
  const int64_t tokens = spec.train.micro_batch * spec.model.context;
  if (dtype_bytes(spec.parallel.precision.param) != 4 && tokens % 2 != 0)
    out.push_back(
        "activation slots would not be 4-byte aligned (odd micro_batch * context with 16-bit "
        "params)");
}

// A custom layer runs on the CPU through its forward and backward; the CUDA
// target needs its forward_cuda and backward_cuda (layers/fsdpgen_layer.h),
// defined in the CUDA sources the layers section names.
void check_custom_layers(const Spec& spec, const Hardware& hw, Reasons& out) {
  if (!hw.gpu) return;
  for (const CustomLayerSpec& c : spec.model.custom) {
    if (!c.cuda)
      out.push_back(fmt::format(
          "custom layer {} (the blocks' {}) in {} declares no forward_cuda and backward_cuda: "
          "the CUDA target needs both (layers/fsdpgen_layer.h)",
          c.layer, c.module, c.header));
    else if (spec.model.layer_cuda_sources.empty())
      out.push_back(fmt::format(
          "custom layer {} (the blocks' {}) declares forward_cuda and backward_cuda, but the "
          "layers section names no CUDA source that defines them (cuda = \"my_layers.cu\")",
          c.layer, c.module));
  }
}

// The loss-spike guard's loss check gates the optimizer on the loss summed
// on the device; with offload on a GPU the optimizer runs on the host, which
// does not see it.
void check_guard(const Spec& spec, const Hardware& hw, Reasons& out) {
  if (hw.gpu && spec.train.guard.loss_z > 0 && spec.parallel.offload == Offload::Cpu)
    out.push_back(
        "guard's loss_z with offload = cpu (the host's optimizer does not see the device's loss; "
        "norm_z works with offload)");
}

// Muon's owner gathers, Newton-Schulz and scatters are written for the CPU
// backend with the optimizer on the compute stream; the CUDA twin has not
// run on a GPU yet, and the host-side optimizer of offload = cpu has none.
void check_muon(const Spec& spec, const Hardware& hw, Reasons& out) {
  if (spec.train.optimizer.kind != OptimizerKind::Muon) return;
  if (hw.gpu)
    out.push_back("optimizer = muon(...) on GPUs (the CPU target has it; use adamw on GPUs)");
  if (spec.parallel.offload == Offload::Cpu)
    out.push_back(
        "optimizer = muon(...) with offload = cpu (Muon's Newton-Schulz does not run "
        "in the host's optimizer)");
}

// Qwen2's q, k and v biases: the CUDA llama block's have not run on a GPU yet.
void check_qkv_bias(const ModelSpec& m, Reasons& out) {
  if (m.qkv_bias) out.push_back("qkv_bias = true");
}

// Qwen3's and OLMo 2's qk-norm and a head size apart from width / heads: the
// CUDA llama block's have not run on a GPU yet.
void check_qk_norm(const ModelSpec& m, Reasons& out) {
  if (m.qk_norm)
    out.push_back(fmt::format("qk_norm = {}", m.qk_norm_across_heads ? "across_heads" : "true"));
  if (m.head_size != 0 && m.head_size * m.heads != m.width)
    out.push_back("head_dim other than width / heads");
}

// Mistral's sliding window: the CUDA attention's has not run on a GPU yet. A
// window of at least the context is plain causal attention.
void check_sliding_window(const ModelSpec& m, Reasons& out) {
  if (m.attention_window() != 0)
    out.push_back(fmt::format("sliding_window = {} (shorter than the context {})", m.sliding_window,
                              m.context));
}

// OLMo 2's post-norm block and Gemma 2's and 3's sandwich: the CUDA llama
// block's have not run on a GPU yet.
void check_block_norms(const ModelSpec& m, Reasons& out) {
  if (m.block_norms != BlockNorms::Pre)
    out.push_back(fmt::format("block_norms = {}", to_string(m.block_norms)));
}

// Gemma's pieces: the CUDA llama's have not run on a GPU yet.
void check_gemma_pieces(const ModelSpec& m, Reasons& out) {
  if (m.scale_embedding) out.push_back("scale_embedding = true");
  if (m.norm_plus_one) out.push_back("norm_plus_one = true");
  if (m.activation != Activation::Silu)
    out.push_back(fmt::format("activation = {}", to_string(m.activation)));
}

// Gemma 2's soft-capping and attention scale: the CUDA attention's and
// cross-entropy's have not run on a GPU yet (a query_pre_attn_scalar of the
// head size changes nothing).
void check_softcaps(const ModelSpec& m, Reasons& out) {
  if (m.attention_softcap != 0)
    out.push_back(fmt::format("attention_softcap = {}", m.attention_softcap));
  if (m.logit_softcap != 0) out.push_back(fmt::format("logit_softcap = {}", m.logit_softcap));
  if (m.attention_scale() != 0)
    out.push_back(fmt::format("query_pre_attn_scalar = {} (not the head size {})",
                              m.query_pre_attn_scalar, m.head_dim()));
}

}  // namespace

std::string_view backend_name(const Hardware& hw) {
  return hw.gpu ? "CUDA" : "CPU";
}

std::vector<std::string> unrun_features(const Spec& spec, const Hardware& hw) {
  Reasons out;
  if (!hw.gpu) return out;
  check_qkv_bias(spec.model, out);
  check_qk_norm(spec.model, out);
  check_block_norms(spec.model, out);
  check_sliding_window(spec.model, out);
  check_gemma_pieces(spec.model, out);
  check_softcaps(spec.model, out);
  return out;
}

std::vector<std::string> unsupported_features(const Spec& spec, const Hardware& hw,
                                              bool allow_unrun) {
  Reasons out;
  check_family(spec, hw, out);
  check_norm_eps(spec, out);
  check_half_mix(spec, out);
  check_master(spec, out);
  check_final_norm_with_head(spec, out);
  check_slot_alignment(spec, out);
  check_custom_layers(spec, hw, out);
  check_guard(spec, hw, out);
  check_muon(spec, hw, out);
  if (allow_unrun) return out;
  for (const std::string& feature : unrun_features(spec, hw))
    out.push_back(fmt::format("{} on GPUs ({})", feature, kTwinNotRun));
  return out;
}

}  // namespace fsdpgen
