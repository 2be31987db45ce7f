// Schedule: the ordered ops of one training step (all micro-batches and the
// optimizer), each on a named stream, with explicit cross-stream
// dependencies, and the buffers they use. Built from Units by
// build_schedule(); exactly DESIGN §4. The op list is in issue order: the
// order in which the generated step issues them. Ops on one stream run in
// issue order; an op also waits for its deps. Every buffer that is not
// persistent is first used after the Free of any buffer it may reuse (Frees
// are on the compute stream, and a first use on another stream depends on
// the compute op issued just before it), so lifetimes measured in issue
// positions are safe for the memory planner.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/planner/Lower.h"
#include "codegen/planner/Muon.h"

namespace fsdpgen {

// Copy: host<->device copies (offload). Host: the optimizer on the CPU (offload).
enum class StreamId { Compute, AllGather, ReduceScatter, AllReduce, Copy, Host };
inline constexpr std::array<std::string_view, 6> kStreamNames = {
    "compute", "allgather", "reducescatter", "allreduce", "copy", "host"};
inline std::string_view to_string(StreamId s) {
  return kStreamNames[static_cast<int>(s)];
}

enum class OpKind {
  AllGather,      // a unit's param shards -> unsharded params (param dtype), over the shard group
  Forward,        // forward of one segment for one micro-batch (the last one includes the loss)
  Recompute,      // recompute = block: the segment's forward again, before its backward
  Backward,       // backward of one segment for one micro-batch
  ReduceScatter,  // a unit's unsharded grads -> this rank's grad shard (reduce dtype), over the
                  // shard group
  AllReduce,  // grads over the replica group (hybrid: the shard; no_shard: the whole unit), or a
              // scalar
  Free,       // buffers return to the plan
  CopyH2D,    // offload: host shard -> device staging
  CopyD2H,    // offload: device grad shard -> host
  GradNorm,   // sum of squares of this rank's grad shards (the all-reduce of the scalar follows)
  OptimizerStep,  // one unit: clip, update the master shard and optimizer state, cast to param
                  // dtype
  // Muon (codegen/planner/Muon.h): each Muon matrix of a unit has an owner rank in
  // the shard group, which gathers the matrix's reduced gradient from the
  // shards that hold it, orthogonalizes its momentum, and scatters the update
  // back to them; the unit's optimizer step then applies it.
  MuonGather,         // grad shard slices -> the owners' whole matrices, over the shard group
  MuonOrthogonalize,  // the owner's momentum step and Newton-Schulz iterations (GEMMs)
  MuonScatter,        // the owners' updates -> each shard's slices, over the shard group
};
inline constexpr std::array<std::string_view, 14> kOpKindNames = {
    "AG",  "F",   "RECOMPUTE", "B",   "RS",          "AR",      "FREE",
    "H2D", "D2H", "GRADNORM",  "OPT", "MUON_GATHER", "MUON_NS", "MUON_SCATTER"};
inline std::string_view to_string(OpKind k) {
  return kOpKindNames[static_cast<int>(k)];
}

enum class CommGroup { None, Shard, Replica, World };
inline constexpr std::array<std::string_view, 4> kCommGroupNames = {"none", "shard", "replica",
                                                                    "world"};
inline std::string_view to_string(CommGroup g) {
  return kCommGroupNames[static_cast<int>(g)];
}

enum class BufferKind {
  ParamShard,         // this rank's shard of a unit, param dtype
  MasterWeights,      // fp32 (master dtype) copy of the shard, when it differs from the param dtype
  OptimizerState,     // AdamW m and v / SGD momentum, master dtype, per shard
  GradShard,          // gradient shard: fp32 when accumulating micro-batches, else the reduce dtype
  UnshardedParams,    // gathered flat parameter of a unit
  UnshardedGrads,     // flat gradient of a unit before reduction, reduce dtype
  Activations,        // what a segment's forward saves for its backward, per micro-batch
  RecomputeScratch,   // recompute = block: a forward's intermediates, or the activations
                      // rebuilt for one backward
  BackwardScratch,    // gradient of the activations flowing through backward
  CommStaging,        // reduce-dtype shard received by a reduce-scatter before accumulation
  Workspace,          // GEMM workspace
  Logits,             // logits and their gradient (B*T*V)
  Inputs,             // token ids and targets of one micro-batch
  RopeTables,         // llama: rotary position cos and sin tables, filled once at start
  CheckpointStaging,  // host: this rank's checkpoint (fp32 weights and optimizer state, in its
                      // shard file's order), copied at the step boundary and written behind the
                      // next steps; only when the spec plans checkpoints
  MuonMomentum,       // Muon: fp32 momentum of the matrices this rank owns, every unit's
  MuonGathered,       // Muon: the matrices of one unit this rank owns, whole: the reduced
                      // gradient (grad shard dtype), then the fp32 update
  MuonUpdate,         // Muon: one unit's fp32 updates at their places in this rank's shard
  MuonWorkspace,      // Muon: Newton-Schulz iterates of the largest matrix
};
inline constexpr std::array<std::string_view, 19> kBufferKindNames = {
    "param_shard",      "master_weights",  "optimizer_state",    "grad_shard",
    "unsharded_params", "unsharded_grads", "activations",        "recompute_scratch",
    "backward_scratch", "comm_staging",    "workspace",          "logits",
    "inputs",           "rope_tables",     "checkpoint_staging", "muon_momentum",
    "muon_gathered",    "muon_update",     "muon_workspace"};
inline std::string_view to_string(BufferKind k) {
  return kBufferKindNames[static_cast<int>(k)];
}

enum class MemSpace { Device, Host };

struct Buffer {
  int id = 0;
  BufferKind kind = BufferKind::Activations;
  MemSpace space = MemSpace::Device;
  std::string name;  // stable, e.g. "params.u3", "acts.s2.mb0"
  int64_t bytes = 0;
  int unit = -1;
  int micro_batch = -1;
  bool persistent = false;  // lives across steps: allocated before the first step, never freed
};

// What a buffer is to the op that uses it, so that the emitter finds each
// operand by its role, not by its name or its position (as Halide's IR nodes
// name their operands).
enum class Role {
  Params,            // the unit's parameters a compute op reads (gathered, or the shard)
  Saved,             // the segment's saved activations (its input under recompute = block)
  NextInput,         // forward: the next segment's saved activations, where its input goes
  RecomputeScratch,  // recompute = block: the forward's intermediates, or those rebuilt
  Workspace,         // GEMM (and cuDNN attention) workspace
  Inputs,            // token ids and targets of the micro-batch
  Logits,            // logits and their gradient
  Grads,             // the unit's unsharded gradients
  Scratch,           // backward: the gradient of the activations
  Staging,           // reduce-scatter: the reduce-dtype shard before accumulation
  GradShard,         // this rank's gradient shard (one rank: the fp32 unsharded gradients)
  Master,            // optimizer: fp32 master weights
  OptimizerState,    // optimizer: AdamW m and v / SGD momentum
  Src,               // copies and all-gather: what is read
  Dst,               // copies and all-gather: what is written
  RopeTables,        // llama compute: the rotary position tables
  MuonMomentum,      // Muon: the owner's momentum (every unit's)
  MuonGathered,      // Muon: the owner's whole matrices of the unit
  MuonUpdate,        // Muon: the updates at their places in this rank's shard
};

struct OpOperand {
  Role role;
  int buffer;  // index into Schedule::buffers
};

struct Op {
  int id = 0;
  OpKind kind = OpKind::Forward;
  StreamId stream = StreamId::Compute;
  int unit = -1;
  int segment = -1;
  int micro_batch = -1;
  CommGroup group = CommGroup::None;
  int64_t group_size = 1;
  int64_t payload_bytes =
      0;             // collectives: size of the whole (unsharded) tensor; copies: bytes copied
  double flops = 0;  // compute on this rank
  int64_t memory_bytes = 0;         // bytes read and written by memory-bound ops (optimizer, norms)
  std::vector<int> deps;            // ops (on other streams) that must finish first
  std::vector<OpOperand> operands;  // buffers read or written, each with its role
  std::vector<int> uses;            // the operands' buffers, in order
  std::vector<int> frees;           // Free: the buffers released

  // The buffer in `role` (the first, for GradNorm's many grad shards), or -1.
  int operand(Role role) const;

  // Bytes this rank sends with a ring algorithm: (n-1)/n of the payload for
  // all-gather and reduce-scatter, twice that for all-reduce. Muon's gather
  // and scatter: the payload, which is what the busiest rank sends or
  // receives.
  int64_t sent_bytes() const;
  std::string label() const;  // "AG u3", "F s2 mb0", "FREE", "AR loss"
  // The loss-spike guard's all-reduce of the step's loss over every rank
  // (train.guard's loss_z): the only all-reduce of no unit over the world.
  bool is_loss_reduce() const {
    return kind == OpKind::AllReduce && unit < 0 && group == CommGroup::World;
  }
};

struct ScheduleOptions {
  bool flash_attention =
      false;  // attention saves softmax statistics instead of the T x T probabilities
  int64_t gemm_workspace_bytes = 0;
  // The workspace buffer also holds what cuDNN's fused attention needs
  // (cudnn_attention_workspace_bytes, Activations.h): it is then the larger of the two.
  bool cudnn_attention_workspace = false;
};

struct Schedule {
  Units units;
  MuonPlan muon;  // optimizer = muon(...): every unit's matrices and owners; else empty
  ScheduleOptions options;
  int64_t micro_batch = 0;  // sequences per rank per micro-batch: the spec's train.micro_batch
  std::vector<Buffer> buffers;
  std::vector<Op> ops;  // issue order

  // Collective bytes sent per rank per step, by kind.
  int64_t sent_bytes(OpKind kind) const;
};

Schedule build_schedule(const Units& units, const ScheduleOptions& options = {});

// The dtype of a unit's unsharded gradients, which the backward writes: the
// reduce dtype when gradients are communicated; with no communication at all
// (world 1) they accumulate in fp32.
DType unsharded_grad_dtype(const ParallelSpec& p);
// The dtype of a gradient shard: fp32 when it accumulates micro-batches or is
// offloaded, else that of the unsharded gradients (a 16-bit shard of one
// micro-batch stays 16-bit and the optimizer upcasts as it reads, as ZeRO does).
DType grad_shard_dtype(const ParallelSpec& p);

// Whether a GPU program runs op on the host (offload = cpu): the host
// stream's ops (the gradient norm and the optimizer) and the collectives that
// touch only host memory (the cross-replica all-reduce of a host gradient
// shard, the all-reduce of the norm's partial sums). No op on the device
// waits for one of these within a step (codegen/planner/Verify checks it), so the
// device never waits for the host.
bool runs_on_host(const Schedule& s, const Op& op);

// Text form: per stream, one op a line with bytes and dependencies.
std::string print_schedule(const Schedule& s);
// Machine-readable, stable JSON.
std::string schedule_json(const Schedule& s);
// One op's fields as JSON ("op" is its id), shared by the schedule JSON and the traces.
nlohmann::ordered_json op_json(const Op& op);

}  // namespace fsdpgen
