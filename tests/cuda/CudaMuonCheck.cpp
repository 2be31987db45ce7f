// CudaMuonCheck: cuda_muon_check, an MPI program (its own main, not
// GoogleTest) that checks Muon's exchanges on the device (runtime/cuda/
// step.h's step_muon_gather and step_muon_scatter) on 2 ranks of one shard
// group: each owner's gathered gradients are its matrices whole, and each
// holder's update shard gets its slices of the owners' updates, exactly,
// with everything else left alone. Three matrices of one unit: one held by
// rank 0 and owned by rank 1, one crossing the shard boundary and owned by
// rank 0, one held and owned by rank 1. In the MPI test mode and, where each
// rank has a GPU of its own, with NCCL. Run it under `mpirun -n 2`. Rank 0
// prints one line per check, then "N check(s) run, M failed". Exit status:
// 0 all passed, 1 a mismatch or an error, 77 no usable GPU (printed as "no
// CUDA device: <reason>").
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/comm.h"
#include "runtime/cuda/step.h"
#include "runtime/muon_layout.h"
#include "tests/cuda/CheckMain.h"
#include "tests/cuda/Device.h"

namespace {

constexpr int64_t kShard = 50;  // elements per rank's shard; the unit is 2 * kShard
constexpr dtype_id kGradType = dtype_id::bf16;

// Small integers: exact in bf16.
float grad_value(int64_t flat) {
  return static_cast<float>(flat % 251 - 125);
}
float update_value(int matrix, int64_t j) {
  return static_cast<float>(matrix * 1000 + j);
}

class muon_program {
 public:
  muon_program() {
    unit_.name = "u0";
    unit_.padded_elems = unit_.param_elems = 2 * kShard;
    unit_.shard_elems = kShard;
    unit_.param_shard = unit_.master = unit_.optimizer_state = unit_.grad_shard = -1;
    unit_.grad_shard_dtype = kGradType;
    // unit, offset, rows, cols, stored (in, out), owner, momentum, gathered offsets
    matrices_ = {{0, 5, 6, 5, false, 1, 0, 0},
                 {0, 35, 8, 5, false, 0, 0, 0},
                 {0, 80, 4, 4, true, 1, 30, 30}};
    for (const auto& [stream, kind] :
         {std::pair{stream_id::allgather, op_kind::muon_gather},
          std::pair{stream_id::reducescatter, op_kind::muon_scatter}}) {
      program_op op{};
      op.id = static_cast<int>(ops_.size());
      op.stream = stream;
      op.kind = kind;
      op.label = "muon";
      op.group = comm_group::shard;
      op.unit = 0;
      op.payload_bytes = 4 * unit_.padded_elems;
      ops_.push_back(op);
    }
    p_.spec_path = "cuda_muon_check";
    p_.parallel.world = p_.parallel.shard_group = 2;
    p_.train.optimizer.kind = optimizer_kind::muon;
    p_.units = &unit_;
    p_.unit_count = 1;
    p_.ops = ops_.data();
    p_.op_count = static_cast<int>(ops_.size());
    p_.muon_matrices = matrices_.data();
    p_.muon_matrix_count = static_cast<int>(matrices_.size());
  }
  muon_program(const muon_program&) = delete;
  muon_program& operator=(const muon_program&) = delete;
  const program& get() const { return p_; }

 private:
  program_unit unit_{};
  std::vector<program_muon_matrix> matrices_;
  std::vector<program_op> ops_;
  program p_{};
};

bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return all == 1;
}

int report(int rank, bool ok, const std::string& what) {
  const bool everywhere = all_ranks(ok);
  if (rank == 0) std::printf("%s %s\n", everywhere ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  return everywhere ? 0 : 1;
}

// Both exchanges in one mode; returns the failures (of 2 checks).
int check_mode(const char* name, gpu_comm_mode mode, int rank) {
  const muon_program mp;
  const program& p = mp.get();
  gpu_select_device(mode);
  comm_groups mpi = comm_create(p.parallel.shard_group);
  gpu_comm_groups comms = gpu_comm_create(p, mode, mpi);
  optimizer_decay_table decay;
  decay.ranges = {{}};
  decay.pointers = {nullptr};
  decay.counts = {0};
  muon_layout layout = muon_layout_of(p, rank, decay);
  const muon_unit_layout& l = layout.units[0];
  step_context c;
  c.p = &p;
  c.muon = &layout;
  gpu_exec g;
  CUDA_CHECK(cudaStreamCreate(&g.stream));
  const int64_t gb = dtype_size(kGradType);

  // The gather: this rank's shard of the flat gradients to the owners.
  std::vector<bf16> shard(kShard);
  for (int64_t i = 0; i < kShard; ++i)
    shard[static_cast<size_t>(i)] = bf16_from_float(grad_value(rank * kShard + i));
  device_vec<bf16> shard_d(shard);
  const int64_t gathered_bytes = l.gathered_elems * (4 + gb);
  device_vec<std::byte> gathered_d(gathered_bytes, 0xff);
  step_muon_gather(c, 0, shard_d.get(), gathered_d.get(),
                   gpu_comm_of(comms, stream_id::allgather, comm_group::shard), g);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  std::vector<std::byte> gathered = gathered_d.download();
  bool ok = true;
  for (int k : l.owned) {
    const program_muon_matrix& m = p.muon_matrices[k];
    const auto* grads =
        reinterpret_cast<const bf16*>(gathered.data() + 4 * l.gathered_elems) + m.gathered_offset;
    for (int64_t j = 0; j < m.elems(); ++j)
      if (bf16_to_float(grads[j]) != grad_value(m.offset_elems + j)) {
        if (ok)
          std::fprintf(stderr, "rank %d: gather: matrix %d element %lld is %g, not %g\n", rank, k,
                       static_cast<long long>(j), bf16_to_float(grads[j]),
                       grad_value(m.offset_elems + j));
        ok = false;
      }
  }
  int failures = report(rank, ok, std::string(name) + ": the owners gather their matrices whole");

  // The scatter: the owners' updates back to the holders' update shards.
  auto* updates = reinterpret_cast<float*>(gathered.data());
  for (int k : l.owned) {
    const program_muon_matrix& m = p.muon_matrices[k];
    for (int64_t j = 0; j < m.elems(); ++j)
      updates[m.gathered_offset + j] = update_value(k, j);
  }
  device_vec<std::byte> updates_d(gathered);
  device_vec<float> update_shard_d(kShard, 0xff);  // NaN: what no slice covers stays NaN
  step_muon_scatter(c, 0, updates_d.get(), update_shard_d.get(),
                    gpu_comm_of(comms, stream_id::reducescatter, comm_group::shard), g);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  const std::vector<float> got = update_shard_d.download();
  ok = true;
  for (int64_t i = 0; i < kShard; ++i) {
    const int64_t flat = rank * kShard + i;
    float want = std::nanf("");
    for (int k = 0; k < p.muon_matrix_count; ++k) {
      const program_muon_matrix& m = p.muon_matrices[k];
      if (flat >= m.offset_elems && flat < m.offset_elems + m.elems())
        want = update_value(k, flat - m.offset_elems);
    }
    const float v = got[static_cast<size_t>(i)];
    if (std::isnan(want) ? !std::isnan(v) : v != want) {
      if (ok)
        std::fprintf(stderr, "rank %d: scatter: shard element %lld is %g, not %g\n", rank,
                     static_cast<long long>(i), v, want);
      ok = false;
    }
  }
  failures += report(rank, ok, std::string(name) + ": the holders receive their update slices");
  CUDA_CHECK(cudaStreamDestroy(g.stream));
  gpu_comm_destroy(comms);
  return failures;
}

int local_size() {
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int n = 1;
  MPI_CHECK(MPI_Comm_size(local, &n));
  MPI_CHECK(MPI_Comm_free(&local));
  return n;
}

int run() {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  const std::string reason = no_device_reason();
  if (!all_ranks(reason.empty())) {
    if (rank == 0)
      std::printf("no CUDA device: %s\n", reason.empty() ? "on another rank" : reason.c_str());
    return 77;
  }
  if (world != 2) {
    if (rank == 0) std::printf("error: run on 2 ranks (mpirun -n 2), not %d\n", world);
    return 1;
  }
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  int checks = 2, failures = check_mode("mpi_test", gpu_comm_mode::mpi_test, rank);
  if (all_ranks(local_size() <= devices)) {
    checks += 2;
    failures += check_mode("nccl", gpu_comm_mode::nccl, rank);
  }
  if (rank == 0) std::printf("%d check(s) run, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_check_main(argc, argv, run);
}
