// Spec: the fully resolved, typed form of a .fsdp file. Every default is
// filled in and every name resolved (wrap units are explicit layer lists), so
// later passes never look at the AST. Produced by check() (Check.h), printed
// back to the spec language by print_spec() (Print.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/model/llama.h"

namespace fsdpgen {

// Each enum has a name table (spelled as in the spec language) and to_string.
enum class Family { Gpt2, Llama };
enum class Sharding { FullShard, ShardGradOp, NoShard, HybridShard, HybridShardZero2 };
enum class DType { FP32, BF16, FP16 };
enum class BackwardPrefetch { Pre, Post, None };
enum class Recompute { None, Block };
enum class Offload { None, Cpu };
enum class AccumulateReduce { Every, Last };
enum class OptimizerKind { AdamW, Sgd, Muon };
// How Muon scales its learning rate by a matrix's shape (torch.optim.Muon's
// adjust_lr_fn; runtime/muon_math.h's muon_adjust).
enum class MuonAdjust { Original, MatchRmsAdamw };
enum class LrScheduleKind { Constant, Cosine, Linear };
enum class DataKind { Synthetic, Text, Tokens };
enum class LossScaleKind { Dynamic, Static };
enum class UnitPolicy { EachBlock, EachLinear, Group, MinParams, Explicit };
// llama's MLP gate: SwiGLU's SiLU (Llama, Qwen, Mistral) or GeGLU's GELU in
// its tanh form (Gemma).
enum class Activation { Silu, GeluTanh };

inline constexpr std::array<std::string_view, 2> kFamilyNames = {"gpt2", "llama"};
inline constexpr std::array<std::string_view, 5> kShardingNames = {
    "full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"};
inline constexpr std::array<std::string_view, 3> kDTypeNames = {"fp32", "bf16", "fp16"};
inline constexpr std::array<std::string_view, 3> kBackwardPrefetchNames = {"pre", "post", "none"};
inline constexpr std::array<std::string_view, 2> kRecomputeNames = {"none", "block"};
inline constexpr std::array<std::string_view, 2> kOffloadNames = {"none", "cpu"};
inline constexpr std::array<std::string_view, 2> kAccumulateReduceNames = {"every", "last"};
inline constexpr std::array<std::string_view, 3> kOptimizerNames = {"adamw", "sgd", "muon"};
inline constexpr std::array<std::string_view, 2> kMuonAdjustNames = {"original", "match_rms_adamw"};
inline constexpr std::array<std::string_view, 3> kLrScheduleNames = {"constant", "cosine",
                                                                     "linear"};
inline constexpr std::array<std::string_view, 3> kDataNames = {"synthetic", "text", "tokens"};
inline constexpr std::array<std::string_view, 2> kLossScaleNames = {"dynamic", "static"};
inline constexpr std::array<std::string_view, 2> kRopeScalingNames = {"llama3", "linear"};
// Where a llama block's norms sit (block_norms): before each sub-block
// (Llama's input_layernorm and post_attention_layernorm) or after each,
// before its residual add (OLMo 2's post_attention_layernorm and
// post_feedforward_layernorm), or both (sandwich: Gemma 2's and 3's
// input_layernorm and post_attention_layernorm around attention,
// pre_feedforward_layernorm and post_feedforward_layernorm around the MLP).
enum class BlockNorms { Pre, Post, Sandwich };
inline constexpr std::array<std::string_view, 3> kBlockNormsNames = {"pre", "post", "sandwich"};
inline std::string_view to_string(BlockNorms v) {
  return kBlockNormsNames[static_cast<int>(v)];
}
inline constexpr std::array<std::string_view, 2> kActivationNames = {"silu", "gelu_tanh"};

inline std::string_view to_string(Family v) {
  return kFamilyNames[static_cast<int>(v)];
}
inline std::string_view to_string(Activation v) {
  return kActivationNames[static_cast<int>(v)];
}
inline std::string_view to_string(Sharding v) {
  return kShardingNames[static_cast<int>(v)];
}
inline std::string_view to_string(DType v) {
  return kDTypeNames[static_cast<int>(v)];
}
// The dtype a word names, in any case: the spec's spelling (fp32, bf16, fp16)
// or the one safetensors and PyTorch use (f32, f16, float32, bfloat16,
// float16), so that a name copied from either is understood everywhere.
inline std::optional<DType> dtype_named(std::string_view word) {
  std::string w(word);
  for (char& ch : w)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  if (w == "fp32" || w == "f32" || w == "float32") return DType::FP32;
  if (w == "bf16" || w == "bfloat16") return DType::BF16;
  if (w == "fp16" || w == "f16" || w == "float16") return DType::FP16;
  return std::nullopt;
}
inline std::string_view to_string(BackwardPrefetch v) {
  return kBackwardPrefetchNames[static_cast<int>(v)];
}
inline std::string_view to_string(Recompute v) {
  return kRecomputeNames[static_cast<int>(v)];
}
inline std::string_view to_string(Offload v) {
  return kOffloadNames[static_cast<int>(v)];
}
inline std::string_view to_string(AccumulateReduce v) {
  return kAccumulateReduceNames[static_cast<int>(v)];
}
inline std::string_view to_string(OptimizerKind v) {
  return kOptimizerNames[static_cast<int>(v)];
}
inline std::string_view to_string(MuonAdjust v) {
  return kMuonAdjustNames[static_cast<int>(v)];
}
inline std::string_view to_string(LrScheduleKind v) {
  return kLrScheduleNames[static_cast<int>(v)];
}
inline std::string_view to_string(DataKind v) {
  return kDataNames[static_cast<int>(v)];
}
inline std::string_view to_string(LossScaleKind v) {
  return kLossScaleNames[static_cast<int>(v)];
}

inline int64_t dtype_bytes(DType d) {
  return d == DType::FP32 ? 4 : 2;
}
inline bool is_hybrid(Sharding s) {
  return s == Sharding::HybridShard || s == Sharding::HybridShardZero2;
}
// The shard group of a non-hybrid strategy: every rank shards (full_shard,
// shard_grad_op) or none does (no_shard).
inline int64_t non_hybrid_shard_group(Sharding s, int64_t world) {
  return s == Sharding::NoShard ? 1 : world;
}
// Strategies whose units stay gathered from forward to backward (ZeRO-2 style).
inline bool keeps_params_through_backward(Sharding s) {
  return s == Sharding::ShardGradOp || s == Sharding::HybridShardZero2 || s == Sharding::NoShard;
}

// The rotary frequency scaling, off by default: llama3(...) (Llama 3.1's,
// transformers' rope_type "llama3") or linear(factor) (every frequency
// divided by factor); runtime/rope.h's rope_scaling says what each does.
struct RopeScalingSpec {
  bool enabled = false;
  bool linear = false;
  double factor = 0;
  double low_freq = 0;
  double high_freq = 0;
  int64_t original_context = 0;
  bool operator==(const RopeScalingSpec&) const = default;
};

// A custom layer (DESIGN §9) in place of a module of every block, as the
// spec names it and as its header's LayerDecl binds it to the model: every
// value a later pass needs, so that no pass reads the header again.
struct CustomTensorSpec {
  std::string name;            // the layer's member, e.g. fc_w
  std::vector<int64_t> shape;  // one or two dimensions, row-major
  enum class Init { Normal, Ones, Zeros } init = Init::Normal;
  double std = 0;  // Normal's standard deviation
  // What optimizer = muon(...) gives it (its Param's Optimizer): the nested
  // AdamW, or Muon with its rows the outputs (OutIn) or the inputs (InOut).
  enum class Muon { None, OutIn, InOut } muon = Muon::None;
  bool operator==(const CustomTensorSpec&) const = default;
};
// A Saved or Scratch member: `per_token` elements a token, of the param dtype or fp32.
struct CustomArraySpec {
  std::string name;
  int64_t per_token = 0;
  bool fp32 = false;
  bool operator==(const CustomArraySpec&) const = default;
};
struct CustomLayerSpec {
  std::string module;  // the block module it replaces (or is added as), e.g. mlp
  std::string layer;   // the class template's name in its header
  std::string header;  // that header, one of ModelSpec::layer_headers
  // Its hyper-parameters in the Hyper struct's order: the value, and the
  // model key it was bound to as written ("" for a number).
  struct Hyper {
    std::string name;
    int64_t value = 0;
    std::string from;
    bool operator==(const Hyper&) const = default;
  };
  std::vector<Hyper> hyper;
  std::vector<CustomTensorSpec> params;
  std::vector<CustomArraySpec> saved, scratch;
  int64_t flops_per_token = 0;  // forward
  bool cuda = false;            // forward_cuda and backward_cuda are declared
  bool operator==(const CustomLayerSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  Family family = Family::Gpt2;
  int64_t vocab = 0;
  int64_t context = 0;  // sequence length in tokens
  int64_t width = 0;    // C
  int64_t heads = 0;
  int64_t kv_heads = 0;    // llama grouped-query attention; equals heads for gpt2
  int64_t layers = 0;      // transformer blocks, L
  int64_t ffn_hidden = 0;  // gpt2: 4C; llama: SwiGLU hidden size
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000;     // llama only
  RopeScalingSpec rope_scaling;  // llama only
  bool qkv_bias = false;         // llama only: q, k and v projections have biases (Qwen2)
  // llama only: q and k pass an RMSNorm before the rotation: each head's
  // (Qwen3, qk_norm = true) or, with qk_norm_across_heads, one over all heads
  // of q and one over all of k (OLMo 2, qk_norm = across_heads).
  bool qk_norm = false;
  bool qk_norm_across_heads = false;
  BlockNorms block_norms = BlockNorms::Pre;  // llama only
  int64_t head_size = 0;                     // llama only: the spec's head_dim (0: width / heads)
  // llama only: each query attends the last sliding_window positions (itself
  // included), Mistral's sliding-window attention; 0: none. A window of at
  // least the context is plain causal attention.
  int64_t sliding_window = 0;
  // llama only, Gemma 2's and 3's alternating layers: layers global_every -
  // 1, 2 * global_every - 1, ... are global, attending every earlier
  // position; the others are local (transformers' layer_types
  // "sliding_attention"), attending the window and rotated with
  // rope_local_theta where given (Gemma 3's rope_local_base_freq). 0: every
  // layer attends the window, rotated with rope_theta.
  int64_t global_every = 0;
  double rope_local_theta = 0;
  // llama only, Gemma's pieces: the embedding's rows scaled by sqrt(width) as
  // they enter the first block (the head reads them unscaled); every RMSNorm
  // scaling by (1 + weight), its weights starting at 0; the MLP's gate.
  bool scale_embedding = false;
  bool norm_plus_one = false;
  Activation activation = Activation::Silu;
  // llama only, Gemma 2's: attention scores and the head's logits soft-capped,
  // X tanh(x / X) (0: none), and q . k scaled by query_pre_attn_scalar^-0.5
  // rather than the head size's (0: the head size).
  double attention_softcap = 0;
  double logit_softcap = 0;
  double query_pre_attn_scalar = 0;
  // The token embedding and an untied head are stored with their rows padded
  // to a multiple of this (llm.c's 50257 -> 50304: cuBLASLt runs the LM-head
  // GEMMs with aligned kernels only then). The padded rows are zero, take no
  // part in the softmax or the loss and are never written out; 1: no padding.
  int64_t pad_vocab_to = 128;
  // Custom layers: the headers they are declared in (as the spec's directory
  // resolves them) and the modules they replace or are added as, in block order.
  std::vector<std::string> layer_headers;
  std::vector<std::string> layer_cuda_sources;  // their CUDA entry points (.cu), for --target cuda
  std::vector<CustomLayerSpec> custom;
  // Not a spec key: `fsdpgen build --check` puts a red zone after each custom
  // layer's Saved and Scratch array (codegen/planner/Activations.h, runtime/cpu/red_zones.h).
  bool custom_red_zones = false;

  int64_t head_dim() const { return head_size != 0 ? head_size : width / heads; }
  bool post_norm() const { return block_norms == BlockNorms::Post; }
  bool sandwich_norm() const { return block_norms == BlockNorms::Sandwich; }
  int64_t q_width() const { return heads * head_dim(); }  // width of q and of attention's output
  // The window attention runs with: 0 where none or at least the context.
  int64_t attention_window() const { return model::attention_window_of(sliding_window, context); }
  // The scale of q . k attention runs with when query_pre_attn_scalar changes
  // it: 0 where none is given or it is the head size.
  double attention_scale() const {
    return model::attention_scale_of(query_pre_attn_scalar, head_dim());
  }
  // Rows of the stored embedding and head, and columns of a logits row.
  int64_t padded_vocab() const { return (vocab + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to; }
  bool operator==(const ModelSpec&) const = default;
};

// One layer of the model in forward order: embed, block 0..L-1, final_norm, head.
struct LayerId {
  enum class Kind { Embed, Block, FinalNorm, Head };
  Kind kind = Kind::Block;
  int64_t block = 0;  // Block only
  // Block only: one piece of the block (an index into its family's piece
  // table, runtime/model/layout.h's Piece), or -1 for the whole block.
  int piece = -1;

  // Position in forward order (embed = 0, block i = 1 + i, final_norm = L + 1, head = L + 2).
  int64_t order(int64_t layers) const {
    switch (kind) {
      case Kind::Embed:
        return 0;
      case Kind::Block:
        return 1 + block;
      case Kind::FinalNorm:
        return layers + 1;
      case Kind::Head:
        return layers + 2;
    }
    return 0;
  }
  // Position among a model's layers and pieces in forward order.
  int64_t position(int64_t layers) const { return order(layers) * 64 + (piece < 0 ? 0 : piece); }
  bool whole() const { return piece < 0; }
  bool operator==(const LayerId&) const = default;
};
// "block 3", "block 3 piece 1" (dsl/Layers' layer_name names the piece).
std::string to_string(const LayerId& l);

struct UnitSpec {
  std::string name;             // "root", "block3", "blocks0_1" or the user's name
  std::vector<LayerId> layers;  // in forward order
  bool operator==(const UnitSpec&) const = default;
};

struct UnitsSpec {
  UnitPolicy policy = UnitPolicy::EachBlock;  // for blocks no explicit unit claims
  int64_t group = 1;                          // Group: blocks per unit
  int64_t min_params = 0;                     // MinParams: threshold
  std::vector<UnitSpec> explicit_units;       // as written (resolved layers)
  // The resolved wrap units: units[0] is the root (the layers no other unit
  // claims; possibly empty), then the others in forward order of their first layer.
  std::vector<UnitSpec> units;
  bool operator==(const UnitsSpec&) const = default;
};

// fp16 loss scaling: dynamic (PyTorch GradScaler: start at init, halve
// after a step whose gradients overflow, double after `interval` finite
// steps) or static (always init). Only fp16 param or reduce dtypes use it.
struct LossScaleSpec {
  LossScaleKind kind = LossScaleKind::Dynamic;
  double init = 65536;
  int64_t interval = 2000;
  bool operator==(const LossScaleSpec&) const = default;
};

struct PrecisionSpec {
  DType param = DType::FP32;   // gathered params and compute
  DType reduce = DType::FP32;  // gradient reduction
  DType master = DType::FP32;  // master weights and optimizer state
  LossScaleSpec loss_scale;
  bool operator==(const PrecisionSpec&) const = default;
};

struct PrefetchSpec {
  bool forward = true;
  BackwardPrefetch backward = BackwardPrefetch::Pre;
  int64_t max_inflight = 2;  // unsharded unit buffers alive at once (static bound)
  bool operator==(const PrefetchSpec&) const = default;
};

struct AccumulateSpec {
  int64_t micro_batches = 1;
  AccumulateReduce reduce = AccumulateReduce::Every;
  bool operator==(const AccumulateSpec&) const = default;
};

struct ParallelSpec {
  int64_t world = 1;
  Sharding sharding = Sharding::FullShard;
  // Ranks that shard each parameter among themselves. Resolved for every
  // strategy: world for full_shard/shard_grad_op, 1 for no_shard, the given
  // (or per-node) size for hybrid. replicas() groups of this size exist.
  int64_t shard_group = 1;
  int64_t ranks_per_node = 1;       // placement: ranks sharing a node (fast links)
  int64_t shard_align_bytes = 256;  // each shard starts on this boundary
  PrecisionSpec precision;
  PrefetchSpec prefetch;
  Recompute recompute = Recompute::None;
  Offload offload = Offload::None;  // params, gradient shards and optimizer state
  // The checkpointed activations (each block's input kept for recompute)
  // wait for their block's backward in host memory.
  bool offload_activations = false;
  AccumulateSpec accumulate;

  int64_t replicas() const { return world / shard_group; }
  bool operator==(const ParallelSpec&) const = default;
};

// AdamW's settings: the optimizer's (adamw), or those of the parameters
// Muon leaves to AdamW (muon's nested adamw(...)).
struct AdamWSpec {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  bool operator==(const AdamWSpec&) const = default;
};

// muon: torch.optim.Muon on the 2-D hidden matrices of every block (lr,
// momentum, weight_decay are Muon's), the nested adamw on the rest
// (embeddings, head, norms, biases, custom layers' parameters).
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 3e-4;
  double beta1 = 0.9;  // adamw
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;  // sgd (muon: 0.95)
  bool nesterov = true;   // muon
  int64_t ns_steps = 5;   // muon: Newton-Schulz iterations
  DType ns_dtype = DType::FP32;
  MuonAdjust adjust_lr = MuonAdjust::Original;
  AdamWSpec adamw;  // muon: the parameters that are not Muon matrices
  bool operator==(const OptimizerSpec&) const = default;
};
// torch.optim.Muon's defaults, except weight_decay (0 here, as Keller Jordan's
// Muon; torch's is 0.1) and lr (0.02, modded-nanogpt's; torch's is 0.001).
inline constexpr double kMuonLr = 0.02, kMuonMomentum = 0.95;

struct LrScheduleSpec {
  LrScheduleKind kind = LrScheduleKind::Constant;
  int64_t warmup = 0;  // steps of linear warm-up from 0
  double min_lr = 0;   // cosine/linear: the optimizer's lr reached at the last step
  // cosine/linear's `min_ratio`: the floor as a fraction of the peak lr, the
  // same for every parameter group (min_lr is then min_ratio x the
  // optimizer's lr); unset where the spec wrote `min` (absolute) or neither.
  std::optional<double> min_ratio;
  bool operator==(const LrScheduleSpec&) const = default;
};

struct DataSpec {
  DataKind kind = DataKind::Synthetic;
  int64_t seed = 7;                // synthetic
  std::vector<std::string> paths;  // text: one file; tokens: files and glob patterns, in order
  // text: `allow_bytes = true`, bytes into a model whose vocabulary is larger
  // than the bytes' 256 (a likely mistake: refused without it).
  bool allow_bytes = false;
  bool operator==(const DataSpec&) const = default;
};

struct CheckpointSpec {
  bool enabled = false;
  int64_t every = 0;
  std::string dir = "ckpt";
  int64_t keep = 2;
  bool operator==(const CheckpointSpec&) const = default;
};

// The watchdog's limit on one op where the spec says none: long enough for
// any op of a healthy step on today's machines, short enough not to burn an
// allocation (PyTorch's NCCL timeout is 10 minutes).
inline constexpr double kDefaultStallTimeoutSeconds = 60;
// The longest stall_timeout a spec may give: a week.
inline constexpr double kMaxStallTimeoutSeconds = 7 * 24 * 3600;

// The loss-spike guard (runtime/train/guard.h): a step whose mean loss or whose
// gradient norm lies more than loss_z or norm_z standard deviations above the
// mean of the last `window` applied steps is not applied (as an fp16
// overflow's: weights and optimizer state unchanged); after max_skips such
// steps in a row the run stops with a checkpoint. A z of 0: that check is off;
// both 0 (the default): no guard.
struct GuardSpec {
  double loss_z = 0;
  double norm_z = 0;
  int64_t window = 100;
  int64_t max_skips = 5;
  bool enabled() const { return loss_z > 0 || norm_z > 0; }
  bool operator==(const GuardSpec&) const = default;
};
inline constexpr double kMaxGuardZ = 1000;
inline constexpr int64_t kMaxGuardWindow = 100000;

struct TrainSpec {
  OptimizerSpec optimizer;
  LrScheduleSpec lr_schedule;
  int64_t micro_batch = 1;  // sequences per rank per micro-batch
  int64_t steps = 100;
  double clip = 1.0;  // global gradient norm; 0 disables clipping
  int64_t seed = 1337;
  DataSpec data;
  // Text and token data: each epoch visits every sequence once in a seeded
  // permutation (the train seed's); false: in file order.
  bool shuffle = true;
  // Held-out data: the mean loss over its first val_sequences sequences,
  // every val_every steps, at checkpoints and at the end (none: no val;
  // val_every 0: none unless the binary's --val-every asks, as the flag's 0).
  std::optional<DataSpec> val;
  int64_t val_every = 250;
  int64_t val_sequences = 256;
  // Multiple-choice evaluation (docs/eval.md): llm.c's HellaSwag-format file
  // `eval` ("": none), scored every eval_every steps, at checkpoints and at
  // the end (0: none unless the binary's --eval-every asks), on its first
  // eval_examples examples (0: all).
  std::string eval;
  int64_t eval_every = 250;
  int64_t eval_examples = 0;
  // Samples (docs/sample.md): every sample_every steps (0: none) rank 0
  // prints a few generations of sample_tokens tokens and adds them to the
  // --metrics line.
  int64_t sample_every = 0;
  int64_t sample_tokens = 64;
  CheckpointSpec checkpoint;
  int64_t log_every = 1;
  // Seconds one op of the step may run before the binary's watchdog reports
  // a stall and every rank exits (runtime/watchdog.h); --stall-timeout
  // overrides it.
  double stall_timeout = kDefaultStallTimeoutSeconds;
  GuardSpec guard;
  bool operator==(const TrainSpec&) const = default;
};

struct Spec {
  ModelSpec model;
  UnitsSpec units;
  ParallelSpec parallel;
  TrainSpec train;
  bool operator==(const Spec&) const = default;
  // Sequences a step trains over all ranks: world x micro_batch x
  // micro_batches: the one product fit, tune and tune's report read.
  int64_t global_batch() const {
    return parallel.world * train.micro_batch * parallel.accumulate.micro_batches;
  }
};

}  // namespace fsdpgen
