// comm (CUDA): choosing the GPU, the NCCL communicators per (stream, group)
// split from one world communicator, the MPI test mode's pinned host staging,
// and the collectives of comm.h. No device code: NCCL and the copies do the
// work.
#include "runtime/cuda/comm.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "runtime/cuda/check.cuh"
#include "runtime/launch.h"

namespace {

constexpr const char* kStreamNames[kStreamCount] = {"compute",   "allgather", "reducescatter",
                                                    "allreduce", "copy",      "host"};
constexpr const char* kGroupNames[4] = {"none", "shard", "replica", "world"};

const char* nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult_t(?)";
  }
}

// What usually causes r and what to try; empty when NCCL's message says it all.
const char* nccl_hint(ncclResult_t r) {
  switch (r) {
    case ncclInvalidUsage:
      return "NCCL needs a GPU per rank: when ranks share one (NCCL's message then says "
             "\"Duplicate GPU detected\"), start one rank per GPU, or run with --comm mpi-test "
             "(the comm layer's test mode: ranks share a GPU through host staging; slow, for "
             "tests); otherwise rerun with NCCL_DEBUG=WARN";
    case ncclSystemError:
      return "a system call or the network failed (sockets, InfiniBand, shared memory): check "
             "the interfaces NCCL chose (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the size of "
             "/dev/shm, and rerun with NCCL_DEBUG=INFO";
    case ncclRemoteError:
      return "a peer rank died or a network link failed: the first error is in another rank's "
             "output";
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed: often out of GPU memory, or an earlier kernel's "
             "fault (rerun with CUDA_LAUNCH_BLOCKING=1)";
    case ncclInvalidArgument:
      return "a buffer, count, type or communicator is wrong: are the buffers on this rank's "
             "GPU?";
    case ncclInternalError:
      return "rerun with NCCL_DEBUG=INFO; check that the NCCL library suits the driver";
    default:
      return "";
  }
}

std::string cuda_error_text(cudaError_t err) {
  std::string text = std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
  const std::string hint = cuda_hint(err);
  if (!hint.empty()) text += "; hint: " + hint;
  return text;
}

std::string visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string("CUDA_VISIBLE_DEVICES=") + v : "CUDA_VISIBLE_DEVICES unset";
}

ncclDataType_t nccl_type(dtype_id t) {
  switch (t) {
    case dtype_id::fp32:
      return ncclFloat32;
    case dtype_id::bf16:
      return ncclBfloat16;
    case dtype_id::fp16:
      return ncclFloat16;
  }
  throw std::runtime_error("internal error: no NCCL type for dtype id " +
                           std::to_string(static_cast<int>(t)));
}

// Bytes of an element the MPI test mode reduces (runtime/comm.h sums fp32,
// bf16 and fp16).
int64_t mpi_reduce_elem_bytes(dtype_id t) {
  switch (t) {
    case dtype_id::fp32:
      return 4;
    case dtype_id::bf16:
    case dtype_id::fp16:
      return 2;
  }
  throw std::runtime_error("internal error: the comm test mode cannot reduce dtype id " +
                           std::to_string(static_cast<int>(t)));
}

bool created(const gpu_comm& c) {
  return c.mode == gpu_comm_mode::nccl ? c.nccl != nullptr : c.mpi != MPI_COMM_NULL;
}

void require_created(const gpu_comm& c, const char* what) {
  if (!created(c))
    throw std::runtime_error(std::string("internal error: ") + what +
                             " on a communicator that gpu_comm_create did not create (no op of "
                             "the program uses its stream and group)");
}

void require_size(int64_t n, const char* what) {
  if (n < 0)
    throw std::runtime_error(std::string("internal error: ") + what + " of " + std::to_string(n) +
                             " elements");
}

// The (stream, group) pairs p's collectives run on the GPU (those a program
// runs on the host, offloading, use runtime/comm.h's communicators).
struct used_pairs {
  bool used[kStreamCount][4] = {};
};
used_pairs pairs_of(const program& p) {
  used_pairs u;
  for (int i = 0; i < p.op_count; ++i)
    if (p.ops[i].group != comm_group::none && !program_runs_on_host(p, i))
      u.used[static_cast<int>(p.ops[i].stream)][static_cast<int>(p.ops[i].group)] = true;
  return u;
}

// Each half of the test mode's staging: a collective sends and receives at
// most the whole unsharded tensor (the op's payload_bytes), and a unit's
// tensors have at most padded_elems elements of at most 4 bytes (the fp32
// all-reduce of a gradient-norm partial is 4 bytes). Rounded up to 256 bytes
// so that the recv half is aligned.
int64_t staging_half_bytes(const program& p) {
  int64_t half = 0;
  for (int i = 0; i < p.op_count; ++i)
    if (p.ops[i].group != comm_group::none) half = std::max(half, p.ops[i].payload_bytes);
  for (int u = 0; u < p.unit_count; ++u)
    half = std::max(half, 4 * p.units[u].padded_elems);
  return (half + 255) / 256 * 256;
}

void create_test_comms(gpu_comm_groups& g, const used_pairs& u, const comm_groups& mpi_comms,
                       int64_t half_bytes) {
  CUDA_CHECK(cudaHostAlloc(&g.staging, static_cast<size_t>(2 * half_bytes), cudaHostAllocDefault));
  g.staging_bytes = 2 * half_bytes;
  for (int s = 0; s < kStreamCount; ++s)
    for (int grp = 1; grp < 4; ++grp) {
      if (!u.used[s][grp]) continue;
      gpu_comm& c = g.comm[s][grp];
      c.mode = gpu_comm_mode::mpi_test;
      c.mpi = mpi_comms.comm[s][grp];
      MPI_CHECK(MPI_Comm_size(c.mpi, &c.size));
      MPI_CHECK(MPI_Comm_rank(c.mpi, &c.rank));
      c.staging = g.staging;
      c.staging_bytes = g.staging_bytes;
    }
}

// Frees one NCCL communicator, ignoring errors (this also runs after failures).
void free_nccl(ncclComm_t c, bool abort) {
  if (abort || ncclCommFinalize(c) != ncclSuccess) {
    ncclCommAbort(c);
    return;
  }
  ncclCommDestroy(c);
}

// The world communicator from a unique id that rank 0 makes and MPI
// broadcasts; each used (stream, group) pair splits its own from it (colour:
// the shard or replica group's index, key: the world rank, so that group
// ranks are ordered as in runtime/comm.h). The first world pair keeps the
// world communicator itself; otherwise it is freed after the splits.
void create_nccl_comms(gpu_comm_groups& g, const used_pairs& u) {
  ncclUniqueId id{};
  std::string error;
  if (g.rank == 0) {
    try {
      NCCL_CHECK(ncclGetUniqueId(&id));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_error(error, "ncclGetUniqueId");
  MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD));

  ncclComm_t world = nullptr;
  bool world_kept = false;
  try {
    NCCL_CHECK(ncclCommInitRank(&world, static_cast<int>(g.world), id, static_cast<int>(g.rank)));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.splitShare = 0;  // own resources: the world communicator may be freed
    for (int s = 0; s < kStreamCount; ++s)
      for (int grp = 1; grp < 4; ++grp) {
        if (!u.used[s][grp]) continue;
        gpu_comm& c = g.comm[s][grp];
        c.mode = gpu_comm_mode::nccl;
        const auto group = static_cast<comm_group>(grp);
        if (group == comm_group::world && !world_kept) {
          c.nccl = world;
          world_kept = true;
        } else {
          const int64_t colour = group == comm_group::shard     ? g.rank / g.shard_group
                                 : group == comm_group::replica ? g.rank % g.shard_group
                                                                : 0;
          NCCL_CHECK(ncclCommSplit(world, static_cast<int>(colour), static_cast<int>(g.rank),
                                   &c.nccl, &config));
        }
        NCCL_CHECK(ncclCommCount(c.nccl, &c.size));
        NCCL_CHECK(ncclCommUserRank(c.nccl, &c.rank));
      }
  } catch (...) {
    if (world && !world_kept) free_nccl(world, true);
    throw;
  }
  if (!world_kept) free_nccl(world, false);
}

// The test mode: send (device) -> host staging, the MPI collective mpi(host
// send, host recv), host staging -> recv (device), waiting for each copy.
template <class Mpi>
void run_staged(const gpu_comm& c, gpu_exec& g, const char* what, const void* send,
                int64_t send_bytes, void* recv, int64_t recv_bytes, Mpi&& mpi) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(g.stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw std::runtime_error(std::string(what) +
                             " cannot be captured in a CUDA graph in the comm test mode "
                             "(mpi-test): it waits for the GPU on the host; run without graphs");
  const int64_t half = c.staging_bytes / 2;
  if (send_bytes > half || recv_bytes > half)
    throw std::runtime_error(
        std::string("internal error: ") + what + " of " + std::to_string(send_bytes) +
        " bytes sent and " + std::to_string(recv_bytes) +
        " received exceeds the test mode's staging of " + std::to_string(half) +
        " bytes each way (gpu_comm_create sizes it from the program's collectives)");
  char* host_send = static_cast<char*>(c.staging);
  char* host_recv = host_send + half;
  CUDA_CHECK(cudaMemcpyAsync(host_send, send, static_cast<size_t>(send_bytes),
                             cudaMemcpyDeviceToHost, g.stream));
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  mpi(host_send, host_recv);
  CUDA_CHECK(cudaMemcpyAsync(recv, host_recv, static_cast<size_t>(recv_bytes),
                             cudaMemcpyHostToDevice, g.stream));
  CUDA_CHECK(cudaStreamSynchronize(g.stream));  // the staging is free for the next collective
}

}  // namespace

void nccl_fail(ncclResult_t r, const char* call, const char* file, int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call +
                    " failed: " + nccl_result_name(r) + " (" + ncclGetErrorString(r) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) msg += "; NCCL says: " + std::string(last);
  const std::string hint = nccl_hint(r);
  if (!hint.empty()) msg += "; hint: " + hint;
  throw std::runtime_error(msg);
}

int gpu_select_device(gpu_comm_mode mode) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int local_rank = 0, local_size = 1;
  launch_local_rank(local_rank, local_size);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_len = 0;
  MPI_CHECK(MPI_Get_processor_name(host, &host_len));

  std::string error;
  int count = 0, device = -1;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    error = "no usable GPU on host " + std::string(host) +
            ": cudaGetDeviceCount failed: " + cuda_error_text(err);
  } else if (count == 0) {
    error = "no GPU is visible on host " + std::string(host) + " (" + visible_devices() + ")";
  } else if (mode == gpu_comm_mode::nccl && local_rank >= count) {
    error = "this rank is local rank " + std::to_string(local_rank) + " of the " +
            std::to_string(local_size) + " ranks on host " + host + ", but only " +
            std::to_string(count) + " GPU(s) are visible (" + visible_devices() +
            "): NCCL needs a GPU per rank; start at most " + std::to_string(count) +
            " rank(s) per node, or run with --comm mpi-test (the comm layer's test mode: ranks "
            "share a GPU through host staging; slow, for tests)";
  } else {
    device = mode == gpu_comm_mode::nccl ? local_rank : local_rank % count;
    const cudaError_t set = cudaSetDevice(device);
    if (set != cudaSuccess)
      error = "cudaSetDevice(" + std::to_string(device) + ") failed on host " + host + ": " +
              cuda_error_text(set);
  }
  agree_on_error(error, "selecting a GPU");
  return device;
}

gpu_comm_groups gpu_comm_create(const program& p, gpu_comm_mode mode,
                                const comm_groups& mpi_comms) {
  if (mpi_comms.shard_group != p.parallel.shard_group)
    throw std::runtime_error("internal error: the CPU communicators are for shard group " +
                             std::to_string(mpi_comms.shard_group) + ", the program's is " +
                             std::to_string(p.parallel.shard_group));
  gpu_comm_groups g;
  g.mode = mode;
  g.rank = mpi_comms.rank;
  g.world = mpi_comms.world;
  g.shard_group = mpi_comms.shard_group;
  g.shard_rank = mpi_comms.shard_rank;
  g.replica_rank = mpi_comms.replica_rank;
  const used_pairs u = pairs_of(p);
  bool any = false;
  for (const auto& per_stream : u.used)
    for (bool used : per_stream)
      any = any || used;
  if (!any) return g;

  std::string error;
  try {
    if (mode == gpu_comm_mode::mpi_test)
      create_test_comms(g, u, mpi_comms, staging_half_bytes(p));
    else
      create_nccl_comms(g, u);
  } catch (const agreed_error&) {  // every rank threw it
    gpu_comm_destroy(g, true);
    throw;
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree_on_error(error, "creating the GPU communicators");
  } catch (...) {
    gpu_comm_destroy(g, true);
    throw;
  }
  return g;
}

void gpu_comm_destroy(gpu_comm_groups& g, bool abort) {
  for (auto& per_stream : g.comm)
    for (gpu_comm& c : per_stream) {
      if (c.nccl) {
        ncclResult_t async = ncclSuccess;
        const bool failed = ncclCommGetAsyncError(c.nccl, &async) != ncclSuccess ||
                            (async != ncclSuccess && async != ncclInProgress);
        free_nccl(c.nccl, abort || failed);
      }
      c = gpu_comm{};
    }
  if (g.staging) cudaFreeHost(g.staging);
  g.staging = nullptr;
  g.staging_bytes = 0;
}

void gpu_comm_check_async(const gpu_comm_groups& g) {
  for (int s = 0; s < kStreamCount; ++s)
    for (int grp = 1; grp < 4; ++grp) {
      const gpu_comm& c = g.comm[s][grp];
      if (!c.nccl) continue;
      ncclResult_t async = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(c.nccl, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string what = std::string("a collective on the ") + kStreamNames[s] +
                                 " stream's " + kGroupNames[grp] + " communicator";
        nccl_fail(async, what.c_str(), __FILE__, __LINE__);
      }
    }
}

const gpu_comm& gpu_comm_of(const gpu_comm_groups& g, stream_id s, comm_group group) {
  const gpu_comm& c = g.comm[static_cast<int>(s)][static_cast<int>(group)];
  if (!created(c))
    throw std::runtime_error(std::string("internal error: no communicator for the ") +
                             kStreamNames[static_cast<int>(s)] + " stream's " +
                             kGroupNames[static_cast<int>(group)] +
                             " group (gpu_comm_create makes those some op of the program uses)");
  return c;
}

void comm_all_gather(const gpu_comm& c, const void* send, void* recv, int64_t bytes, gpu_exec& g) {
  require_created(c, "all-gather");
  require_size(bytes, "all-gather");
  if (c.mode == gpu_comm_mode::nccl) {
    NCCL_CHECK(ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, c.nccl, g.stream));
    return;
  }
  run_staged(c, g, "all-gather", send, bytes, recv, bytes * c.size,
             [&](void* hs, void* hr) { comm_all_gather(c.mpi, hs, hr, bytes); });
}

void comm_reduce_scatter(const gpu_comm& c, const void* send, void* recv, int64_t count, dtype_id t,
                         gpu_exec& g) {
  require_created(c, "reduce-scatter");
  require_size(count, "reduce-scatter");
  if (c.mode == gpu_comm_mode::nccl) {
    NCCL_CHECK(ncclReduceScatter(send, recv, static_cast<size_t>(count), nccl_type(t), ncclSum,
                                 c.nccl, g.stream));
    return;
  }
  const int64_t bytes = count * mpi_reduce_elem_bytes(t);
  run_staged(c, g, "reduce-scatter", send, bytes * c.size, recv, bytes,
             [&](void* hs, void* hr) { comm_reduce_scatter(c.mpi, hs, hr, count, t); });
}

void comm_all_reduce(const gpu_comm& c, const void* send, void* recv, int64_t count, dtype_id t,
                     gpu_exec& g) {
  require_created(c, "all-reduce");
  require_size(count, "all-reduce");
  if (c.mode == gpu_comm_mode::nccl) {
    NCCL_CHECK(ncclAllReduce(send, recv, static_cast<size_t>(count), nccl_type(t), ncclSum, c.nccl,
                             g.stream));
    return;
  }
  const int64_t bytes = count * mpi_reduce_elem_bytes(t);
  run_staged(c, g, "all-reduce", send, bytes, recv, bytes,
             [&](void* hs, void* hr) { comm_all_reduce(c.mpi, hs, hr, count, t); });
}
