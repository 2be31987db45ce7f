// profile: a hardware profile, what `fsdpgen calibrate` measured on one
// machine (docs/calibrate.md, "Hardware profiles", documents the JSON): how long
// each layer's forward and backward, the optimizer and the other element-wise
// ops take as the runtime runs them, and the collectives and host copies
// through the runtime's comm layer. One schema for both sides: the planner
// reads profiles, the calibration binary fills one (a request is a profile
// whose times are still zero). Plain values and JSON, no planner or runtime
// types, so that both can link it.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen::profile {

// The schema's version: a profile of another version is refused (a
// calibration is minutes: measure again rather than migrate).
inline constexpr int kVersion = 1;
inline constexpr std::string_view kFormat = "fsdpgen-profile";

// A bad profile: the message names the file and the field, e.g.
// "p.json: compute[0].layers[3].seconds: must be a positive number".
struct ProfileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Device {
  std::string kind;   // "cpu" or "cuda": the runtime that was measured
  std::string name;   // the part: /proc/cpuinfo's model name, or the CUDA device name
  std::string base;   // built-in hardware (codegen/planner/Hardware.h) for what is not measured
  int64_t cores = 0;  // cpu: cores of the node; cuda: streaming multiprocessors
  int64_t memory_bytes = 0;  // cpu: the node's memory; cuda: one device's
};

// One layer pass as the family's runtime runs it (runtime/cpu/gpt2.h): layer
// "embed", "block" or "head" (the final norm, the head and the loss), pass
// "forward", "recompute" or "backward"; dims are the kernel's shape (B, T, C,
// H, F, V padded, flash 0/1, ...), named as the family's dims struct names them.
struct LayerTime {
  std::string family;
  std::string layer;
  std::string pass;
  std::string dtype;       // params and activations
  std::string grad_dtype;  // gradients (backward only; "" otherwise)
  std::map<std::string, int64_t> dims;
  double seconds = 0;  // mean of `runs` timed runs; 0 in a request
  int64_t runs = 0;
};

// An element-wise op over `elems` elements: "adamw" and "sgd" (the update of
// fp32 master weights from a gradient of `dtype`), "grad_norm" (sum of
// squares of a gradient of `dtype`), "convert" (fp32 master -> `dtype` params).
struct ElementwiseTime {
  std::string op;
  std::string dtype;
  int64_t elems = 0;
  double seconds = 0;
  int64_t runs = 0;
};

// Muon's owner step on one (rows, cols) matrix as runtime/cpu/muon.h's
// muon_orthogonalize runs it: the momentum step (from an fp32 gradient), then
// ns_steps Newton-Schulz iterations of 3 GEMMs in ns_dtype ("fp32" or "bf16").
struct MuonNsTime {
  int64_t rows = 0, cols = 0;
  int64_t ns_steps = 0;
  std::string ns_dtype;
  double seconds = 0;  // one matrix
  int64_t runs = 0;
};

// What one rank computes while `ranks_per_node` ranks compute at once on its
// node, each with `threads_per_rank` threads (on a CPU they share cores and
// memory bandwidth; on GPUs one rank per device).
struct Compute {
  int64_t ranks_per_node = 1;
  int64_t threads_per_rank = 1;
  // The cost of handing one op of the schedule to its stream (a worker
  // thread's wake-up on a CPU, a launch on a GPU): measured, not looked up.
  double op_overhead_s = 0;
  std::vector<LayerTime> layers;
  std::vector<ElementwiseTime> elementwise;
  std::vector<MuonNsTime> muon_ns;  // optional in the JSON: none when absent
};

// A collective of the step ("all_gather", "reduce_scatter", "all_reduce") over
// `ranks` ranks on `nodes` nodes; bytes is the payload as the schedule counts
// it (the whole unsharded tensor; all_reduce: the reduced tensor), dtype the
// reduction's. "send_recv" is Muon's point-to-point exchange (MUON_GATHER,
// MUON_SCATTER) as a ring shift: every rank sends `bytes` to the next rank
// while it receives `bytes` from the previous one (the schedule's payload:
// the busiest rank's bytes); dtype is the exchanged data's, a label.
struct CollectiveTime {
  std::string op;
  std::string dtype;
  int64_t ranks = 2;
  int64_t nodes = 1;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t runs = 0;
};

// A host <-> device copy ("h2d", "d2h") of `bytes`.
struct CopyTime {
  std::string op;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t runs = 0;
};

// A collective and a layer pass at once on each rank of the collective's
// group, as a training step runs them on a CPU: the collective on a stream's
// worker thread through the comm layer (which progresses when that thread
// polls), the layer pass on the compute thread, both sharing the rank's
// cores and memory bandwidth. collective.seconds is the collective's mean
// time while the layer passes run; layer.seconds the layer pass's mean time
// while the collectives run (with the compute section of ranks_per_node =
// collective.ranks). Beside the same entries' times alone (collectives[],
// compute[].layers[]) they give the cost model each one's speed while the
// other runs. Measured on the CPU runtime only (a GPU's copy engines and
// NCCL's kernels share the device otherwise; not measured).
struct ContentionTime {
  CollectiveTime collective;
  LayerTime layer;
};

struct Profile {
  int version = kVersion;
  std::string written_by;  // "fsdpgen <git revision>": whose kernels were measured
  std::string created;     // UTC, ISO 8601
  std::string sweep;       // what was asked for: the specs, or "standard"
  Device device;
  std::vector<Compute> compute;  // by ranks_per_node, ascending
  std::vector<CollectiveTime> collectives;
  std::vector<CopyTime> copies;
  std::vector<ContentionTime> contention;  // optional in the JSON: none when absent
};

// Stable, indented JSON (fields in schema order).
std::string to_json(const Profile& p);

// Parses and checks a profile read from `file` (named in errors). A request
// (`measured` false) may hold zero times; a profile may not.
Profile from_json(std::string_view text, std::string_view file, bool measured = true);

// Reads and checks `path`; throws ProfileError naming it when it is missing,
// unreadable or invalid.
Profile load(const std::string& path, bool measured = true);
// Writes `p` to `path` (through a temporary file and a rename: a failed
// write leaves no half profile); throws ProfileError.
void save(const Profile& p, const std::string& path);

// The dtype names the schema uses.
bool is_dtype(std::string_view name);

}  // namespace fsdpgen::profile
