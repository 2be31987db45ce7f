// program: what a generated binary hands the runtime. The schedule planned by
// fsdpgen, as constant tables (buffers at arena offsets, units and their
// tensors, ops per stream with dependencies) plus one function per op that
// the runtime calls in issue order on the op's stream. Nothing in here is
// decided at run time.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/muon_math.h"

struct step_context;

// Streams and op kinds, numbered as in codegen/planner/Schedule.h.
enum class stream_id : int { compute, allgather, reducescatter, allreduce, copy, host };
inline constexpr int kStreamCount = 6;
enum class op_kind : int {
  all_gather,
  forward,
  recompute,
  backward,
  reduce_scatter,
  all_reduce,
  free,
  copy_h2d,
  copy_d2h,
  grad_norm,
  optimizer_step,
  muon_gather,
  muon_orthogonalize,
  muon_scatter
};
inline constexpr int kOpKindCount = static_cast<int>(op_kind::muon_scatter) + 1;

// An op kind in words, as reports name it ("forward", "all-gather").
inline const char* op_kind_name(op_kind k) {
  constexpr const char* kNames[kOpKindCount] = {
      "all-gather",     "forward",     "recompute",          "backward",         "reduce-scatter",
      "all-reduce",     "free",        "copy to the device", "copy to the host", "gradient norm",
      "optimizer step", "Muon gather", "Newton-Schulz",      "Muon scatter"};
  return kNames[static_cast<int>(k)];
}

// An op kind's short label, as the planner's schedules and traces write it
// ("AG", "MUON_NS"; codegen/planner/Schedule.h's kOpKindNames, which the
// emitter checks equal to these).
inline constexpr const char* kOpKindLabels[kOpKindCount] = {
    "AG",  "F",   "RECOMPUTE", "B",   "RS",          "AR",      "FREE",
    "H2D", "D2H", "GRADNORM",  "OPT", "MUON_GATHER", "MUON_NS", "MUON_SCATTER"};
inline const char* op_kind_label(op_kind k) {
  return kOpKindLabels[static_cast<int>(k)];
}

// A collective's time on one rank includes its wait for the others.
inline bool op_kind_is_collective(op_kind k) {
  return k == op_kind::all_gather || k == op_kind::reduce_scatter || k == op_kind::all_reduce ||
         k == op_kind::muon_gather || k == op_kind::muon_scatter;
}

// Communicators, as the planner's CommGroup.
enum class comm_group : int { none, shard, replica, world };

enum class memory_space : int { device, host };

struct program_buffer {
  const char* name;  // e.g. "acts.s2.mb0"
  memory_space space;
  int64_t offset;  // bytes into the arena of its space
  int64_t bytes;
  bool persistent;
};

// How a tensor is initialized: by its name (GPT-2's rule, runtime/init.h),
// or as a custom layer's header declares it (DESIGN §9).
enum class tensor_init : int { by_name, zeros, ones, normal };

// One tensor of a unit's flat parameter (Hugging Face name and global shape).
struct program_tensor {
  const char* name;
  int unit;
  int64_t offset_elems;  // in the unit's unsharded flat parameter
  int64_t rows, cols;    // shape (cols = 0 for a vector)
  tensor_init init = tensor_init::by_name;
  float init_std = 0;  // tensor_init::normal's
  int64_t elems() const { return cols > 0 ? rows * cols : rows; }
  std::vector<int64_t> shape() const {
    return cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
  }
};

struct program_unit {
  const char* name;
  int64_t param_elems;
  int64_t padded_elems;
  int64_t shard_elems;  // per rank of the shard group
  int first_tensor, tensor_count;
  int param_shard, master, optimizer_state, grad_shard;  // buffers (-1: none)
  dtype_id grad_shard_dtype;
};

// One op of the schedule: what the executor needs to run it (stream, deps,
// run) and the planner's fields the trace writes as the op's JSON (the
// planner's op_json).
struct program_op {
  int id = 0;
  stream_id stream = stream_id::compute;
  op_kind kind = op_kind::forward;
  const char* label = "";                         // "AG u3", "F s2 mb0", ...
  int unit = -1, segment = -1, micro_batch = -1;  // -1: none
  comm_group group = comm_group::none;
  int64_t group_size = 1;
  int64_t payload_bytes = 0;  // collectives: the whole tensor; copies: bytes copied
  int64_t sent_bytes = 0;     // by this rank (ring algorithm)
  int64_t memory_bytes = 0;   // read and written by memory-bound ops
  double flops = 0;           // compute on this rank
  // The cost model's time of the op alone on the hardware it was planned for
  // (fsdpgen's built-in figures for the target); 0: none. The watchdog allows
  // an op kWatchPredictedFactor times this when that exceeds its timeout.
  double predicted_s = 0;
  const int* deps = nullptr;  // ops on other streams that must finish first
  int dep_count = 0;
  void (*run)(step_context&) = nullptr;
};

// The part of a tensor inside one rank's shard of its unit (shard_elems
// elements from shard_rank * shard_elems of the flat parameter).
struct shard_piece {
  int64_t tensor_begin, tensor_end;  // elements of the tensor
  int64_t shard_offset;              // where tensor_begin sits in the shard
};
// False when the tensor has no element in that shard.
inline bool shard_piece_of(const program_tensor& t, int64_t shard_elems, int64_t shard_rank,
                           shard_piece& out) {
  const int64_t lo = shard_rank * shard_elems, hi = lo + shard_elems;
  const int64_t a = lo > t.offset_elems ? lo : t.offset_elems;
  const int64_t end = t.offset_elems + t.elems(), b = hi < end ? hi : end;
  if (a >= b) return false;
  out = {a - t.offset_elems, b - t.offset_elems, a - lo};
  return true;
}

enum class optimizer_kind : int { adamw, sgd, muon };

// optimizer = muon(...): one Muon matrix (codegen/planner/Muon.h's MuonMatrix and
// MuonOwner), where its unit's flat parameter stores it, row-major, and
// which rank of the shard group orthogonalizes it and where that rank keeps
// it. Which part of it each shard holds follows from the flat layout.
struct program_muon_matrix {
  int unit;
  int64_t offset_elems;  // in the unit's unsharded flat parameter
  int64_t rows, cols;
  bool stored_transposed;   // (in, out), as GPT-2's Conv1D; else nn.Linear's (out, in)
  int owner;                // rank in the shard group
  int64_t momentum_offset;  // elements into the owner's muon_momentum buffer
  int64_t gathered_offset;  // elements into the owner's gathered matrices of the unit
  int64_t elems() const { return rows * cols; }
};
enum class lr_schedule_kind : int { constant, cosine, linear };
enum class data_source : int { synthetic, text, tokens };

enum class model_family : int { gpt2, llama };

// llama's rotary positions: rope_theta and the frequency scaling, Llama
// 3.1's (transformers' rope_type "llama3") or linear's (factor alone;
// rope.h's rope_scaling); factor 0: none.
struct program_rope {
  double theta = 10000.0;
  double factor = 0.0, low_freq = 0.0, high_freq = 0.0;
  int64_t original_context = 0;
  bool linear = false;
  // The local layers' base (Gemma 3's rope_local_base_freq; global_every); 0: theta.
  double local_theta = 0.0;
};

// The model, as the spec's model block. The fields after padded_vocab are
// llama's (a gpt2 program leaves them at their defaults).
struct program_model {
  int64_t vocab, context, width, heads, layers, ffn_hidden;
  bool tied;
  int64_t params;        // real parameters
  int64_t padded_vocab;  // rows the embedding and head are stored with (>= vocab; zero rows after)
  model_family family = model_family::gpt2;
  int64_t kv_heads = 0;    // grouped-query attention's k and v heads (0: heads)
  double norm_eps = 1e-5;  // RMSNorm's epsilon
  program_rope rope = {};
  bool qkv_bias = false;  // q, k and v projections have biases (Qwen2)
  bool qk_norm = false;   // each head's q and k pass an RMSNorm before the rotation (Qwen3)
  int64_t head_dim = 0;   // the spec's head size (0: width / heads)
  // With qk_norm: one RMSNorm over all of q's heads and one over k's (OLMo 2).
  bool qk_norm_across_heads = false;
  // The block's norms follow attention and the MLP, before each residual add
  // (OLMo 2's post_attention_layernorm and post_feedforward_layernorm).
  bool post_norm = false;
  // Each query attends the last sliding_window positions (Mistral); 0: none.
  int64_t sliding_window = 0;
  // Gemma's pieces: the embedding's rows scaled by sqrt(width) into the first
  // block; every RMSNorm scaling by (1 + weight); the MLP's gate GELU (tanh
  // form, GeGLU) rather than SiLU (SwiGLU).
  bool scale_embedding = false;
  bool norm_plus_one = false;
  bool gelu_gate = false;
  // Gemma 2's: attention scores and the head's logits soft-capped, X tanh(x /
  // X) (0: none); q . k scaled by query_pre_attn_scalar^-0.5 (0: the head size's).
  double attention_softcap = 0.0;
  double logit_softcap = 0.0;
  double query_pre_attn_scalar = 0.0;
  // Gemma 2's and 3's: norms before and after each sub-block; layers
  // global_every - 1, 2 * global_every - 1, ... global, the others local:
  // the window, and rope.local_theta where given (0: every layer alike).
  bool sandwich_norm = false;
  int64_t global_every = 0;
  int64_t head_size() const { return head_dim != 0 ? head_dim : width / heads; }
};

// fp16 loss scaling (runtime/train/loss_scale.h): dynamic or static, the initial
// scale, finite steps between growths.
struct program_loss_scale {
  bool dynamic;
  double init;
  int64_t interval;
};

struct program_precision {
  dtype_id param, reduce, master;
  program_loss_scale loss_scale;
};

// Parallelism, as the spec's parallel block.
struct program_parallel {
  int64_t world, shard_group, micro_batches, micro_batch;
  program_precision precision;
  // Ranks the plan puts on each node; the launch checks a run that spans
  // hosts against it (runtime/placement.h).
  int64_t ranks_per_node = 1;
};

struct program_optimizer {
  optimizer_kind kind;
  double lr, beta1, beta2, eps, weight_decay, momentum;
  // muon: torch.optim.Muon's settings (lr, momentum and weight_decay above
  // are Muon's), and the nested AdamW's for the parameters that are no Muon
  // matrix's (its lr follows the schedule in proportion to lr).
  bool nesterov = true;
  int64_t ns_steps = 5;
  dtype_id ns_dtype = dtype_id::fp32;
  muon_adjust adjust_lr = muon_adjust::original;
  double adamw_lr = 0, adamw_beta1 = 0, adamw_beta2 = 0, adamw_eps = 0, adamw_weight_decay = 0;
};

struct program_lr_schedule {
  lr_schedule_kind kind;
  int64_t warmup;
  double min_lr;
};

struct program_data {
  data_source source;
  int64_t seed;       // synthetic
  const char* paths;  // text: the file; tokens: files and glob patterns, one per line
};

struct program_checkpoint {
  int64_t every;  // steps between checkpoints (0: none)
  const char* dir;
  int64_t keep;  // newest checkpoints kept
};

// Training, as the spec's train block.
// The loss-spike guard (runtime/train/guard.h), as the spec's train.guard: a z of
// 0 turns its check off; both 0: no guard.
struct program_guard {
  double loss_z = 0, norm_z = 0;
  int64_t window = 0, max_skips = 0;
};

struct program_train {
  program_optimizer optimizer;
  program_lr_schedule lr_schedule;
  int64_t steps;
  double clip;
  int64_t seed;
  program_data data;
  int64_t log_every;
  program_checkpoint checkpoint;
  bool shuffle = false;  // text and token data: a seeded permutation per epoch
  // Validation (val_every 0: none): the mean loss over val's first
  // val_sequences sequences, by the plan's validation pass.
  program_data val = {data_source::synthetic, 0, ""};
  int64_t val_every = 0;
  int64_t val_sequences = 0;
  // Multiple-choice evaluation (runtime/train/eval.h): llm.c's HellaSwag-format
  // file ("": none), every eval_every steps (0: only where --eval-every
  // asks), on its first eval_examples examples (0: all).
  const char* eval = "";
  int64_t eval_every = 0;
  int64_t eval_examples = 0;
  // Samples (runtime/train/training_samples.cpp): every sample_every steps (0:
  // only where --sample-every asks), generations of sample_tokens tokens.
  int64_t sample_every = 0;
  int64_t sample_tokens = 64;
  double stall_timeout_s = 0;  // the watchdog's limit on one op (--stall-timeout's default)
  program_guard guard;
};

// The memory plan's totals.
struct program_plan {
  int64_t device_arena_bytes, host_arena_bytes, live_peak_bytes;
  int64_t workspace_buffer;  // GEMM workspace buffer (-1: none)
  bool flash_attention;      // attention saves log-sum-exp, not probabilities (gpt2_dims::flash)
  int64_t rope_buffer = -1;  // llama: the rotary position tables, filled at start (-1: none)
  // The validation pass: the step's first ops (codegen/planner/Validation.h), which
  // gather and run the forward of micro-batch 0 and nothing else.
  int64_t validation_op_count = 0;
  // `fsdpgen build --check`: bytes of red zone before and after every buffer
  // (runtime/cpu/red_zones.h), 0 in a normal build.
  int64_t red_zone_bytes = 0;
  // Host copy of this rank's checkpoint, written behind the next steps
  // (runtime/train/checkpoint.h checkpoint_writer); -1: none (checkpoints are
  // written synchronously).
  int64_t checkpoint_staging_buffer = -1;
  // optimizer = muon(...): the owners' momentum (-1: none).
  int64_t muon_momentum_buffer = -1;
};

// When a buffer is live: from the op at issue position first_op to the one
// at last_op (its Free), both included.
struct program_buffer_life {
  int first_op, last_op;
};

// A red zone inside a buffer (--check): after a custom layer's Saved or
// Scratch array `name`, `bytes` from `offset` into buffer `buffer`.
struct program_red_zone {
  int buffer;
  int64_t offset, bytes;
  const char* name;
};

struct program {
  // Where it came from.
  const char* spec_path;
  const char* model_name;
  const char* schedule_text;  // what `fsdpgen schedule` prints
  uint64_t hash;              // of the spec and the schedule: ranks must agree

  program_model model;
  program_parallel parallel;
  program_train train;
  program_plan plan;

  // The schedule's tables.
  const program_buffer* buffers;
  int buffer_count;
  const program_unit* units;
  int unit_count;
  const program_tensor* tensors;
  int tensor_count;
  const program_op* ops;  // issue order
  int op_count;
  // GPU programs that offload (offload = cpu): the ops run on the host, not
  // on a device stream (written in the CPU vocabulary, on host memory), by id
  // in issue order. CPU programs run every op on the host and leave it empty.
  const int* host_ops = nullptr;
  int host_op_count = 0;
  // With red zones: each buffer's life, by buffer id (null otherwise).
  const program_buffer_life* buffer_life = nullptr;
  const program_red_zone* inner_red_zones = nullptr;
  int inner_red_zone_count = 0;
  // optimizer = muon(...): every unit's Muon matrices, by unit then offset.
  const program_muon_matrix* muon_matrices = nullptr;
  int muon_matrix_count = 0;
};

// Sequences a step trains over all ranks: world x micro_batches x
// micro_batch (fsdpgen's Spec::global_batch), what the data, the checkpoints'
// sequence counts and the logged tokens per step read.
inline int64_t program_global_batch(const program& p) {
  return p.parallel.world * p.parallel.micro_batches * p.parallel.micro_batch;
}

// Whether the spec names validation data (val_sequences, at least 1, is
// written only then; its val_every may be 0: validation only where
// --val-every asks).
inline bool program_has_val(const program& p) {
  return p.train.val_sequences > 0;
}

// Whether a GPU program runs op `id` on the host (program::host_ops).
inline bool program_runs_on_host(const program& p, int id) {
  for (int i = 0; i < p.host_op_count; ++i)
    if (p.host_ops[i] == id) return true;
  return false;
}

// The generated main() calls this.
int train_main(const program& p, int argc, char** argv);
