// CommCheck: cuda_comm_check, an MPI program (its own main, not GoogleTest)
// that checks runtime/cuda/comm.h's collectives against closed-form sums and
// runtime/comm.h's CPU collectives, exactly: for fp32 and bf16, every group
// (shard, replica, world) of every shard-group size that divides the world, in
// the MPI test mode and, where every rank has a GPU of its own, with NCCL
// (ranks sharing a GPU check instead that NCCL mode is refused with a hint).
// Run it under `mpirun -n 2` (ranks sharing one GPU) or alone (world 1).
// Rank 0 prints one line per check, then "N check(s) run, M failed". Exit
// status: 0 all passed, 1 a mismatch or an error, 77 no usable GPU (printed
// as "no CUDA device: <reason>").
// Values are small integers, exact in bf16, so every sum is exact.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/comm.h"
#include "runtime/dtype.h"
#include "runtime/program.h"
#include "tests/cuda/CheckMain.h"
#include "tests/cuda/Device.h"

namespace {

// Sums of (rank + 1) * 6 over up to 8 ranks stay within bf16's exact integers (256).
constexpr int kMaxWorld = 8;
constexpr int64_t kCounts[] = {1031, 262147};  // elements per rank's block: odd, small and ~1 MiB
constexpr int64_t kMaxCount = 262147;
constexpr comm_group kGroups[] = {comm_group::shard, comm_group::replica, comm_group::world};
constexpr stream_id kCollectiveStreams[] = {stream_id::allgather, stream_id::reducescatter,
                                            stream_id::allreduce};

const char* group_name(comm_group g) {
  switch (g) {
    case comm_group::none:
      return "none";
    case comm_group::shard:
      return "shard";
    case comm_group::replica:
      return "replica";
    case comm_group::world:
      return "world";
  }
  return "?";
}

template <class T>
dtype_id dtype_of();
template <>
dtype_id dtype_of<float>() {
  return dtype_id::fp32;
}
template <>
dtype_id dtype_of<bf16>() {
  return dtype_id::bf16;
}

int local_size() {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_size(local, &size));
  MPI_CHECK(MPI_Comm_free(&local));
  return size;
}

int world_rank() {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

bool all_ranks(bool mine) {
  int in = mine ? 1 : 0, out = 0;
  MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return out != 0;
}

// A program whose ops use every collective stream with every group (so that
// gpu_comm_create makes all nine communicators), with one unit sized for the
// largest collective checked.
class fake_program {
 public:
  fake_program(int64_t world, int64_t shard_group) {
    unit_.name = "u0";
    unit_.padded_elems = world * kMaxCount;
    unit_.param_elems = unit_.padded_elems;
    unit_.shard_elems = unit_.padded_elems / shard_group;
    for (stream_id s : kCollectiveStreams)
      for (comm_group g : kGroups) {
        program_op op{};
        op.id = static_cast<int>(ops_.size());
        op.stream = s;
        op.kind = s == stream_id::allgather       ? op_kind::all_gather
                  : s == stream_id::reducescatter ? op_kind::reduce_scatter
                                                  : op_kind::all_reduce;
        op.label = "collective";
        op.group = g;
        op.payload_bytes = 4 * unit_.padded_elems;
        ops_.push_back(op);
      }
    p_.spec_path = "cuda_comm_check";
    p_.parallel.world = world;
    p_.parallel.shard_group = shard_group;
    p_.units = &unit_;
    p_.unit_count = 1;
    p_.ops = ops_.data();
    p_.op_count = static_cast<int>(ops_.size());
  }
  fake_program(const fake_program&) = delete;
  fake_program& operator=(const fake_program&) = delete;
  const program& get() const { return p_; }

 private:
  program_unit unit_{};
  std::vector<program_op> ops_;
  program p_{};
};

class device_buffer {
 public:
  explicit device_buffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1)); }
  ~device_buffer() { cudaFree(ptr_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

template <class T>
void upload(void* dst, const std::vector<T>& v) {
  CUDA_CHECK(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const void* src, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

template <class T, class F>
std::vector<T> values(int64_t n, F f) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = from_float<T>(f(i));
  return v;
}
// World rank r's all-gather block, and its reduction input.
float gather_value(int r, int64_t i) {
  return static_cast<float>(16 * (r + 1) + i % 16);
}
float reduce_input(int r, int64_t j) {
  return static_cast<float>((r + 1) * (static_cast<int>(j % 13) - 6));
}

// This rank's group as runtime/comm.h defines it: the world ranks in group
// rank order, and this rank's position among them.
struct expected_group {
  std::vector<int> members;
  int index = 0;
};
expected_group group_of(comm_group g, int rank, int world, int shard_group) {
  expected_group e;
  const int S = shard_group;
  for (int r = 0; r < world; ++r) {
    if (g == comm_group::shard && r / S != rank / S) continue;
    if (g == comm_group::replica && r % S != rank % S) continue;
    if (r == rank) e.index = static_cast<int>(e.members.size());
    e.members.push_back(r);
  }
  return e;
}
// Every member's all-gather block, in group order.
template <class T>
std::vector<T> gathered(const expected_group& e, int64_t n) {
  std::vector<T> v;
  for (int r : e.members)
    for (int64_t i = 0; i < n; ++i)
      v.push_back(from_float<T>(gather_value(r, i)));
  return v;
}
// Elements [first, first + n) of the sum of the members' reduction inputs.
template <class T>
std::vector<T> summed(const expected_group& e, int64_t first, int64_t n) {
  return values<T>(n, [&](int64_t i) {
    int sum = 0;
    for (int r : e.members)
      sum += (r + 1) * (static_cast<int>((first + i) % 13) - 6);
    return static_cast<float>(sum);
  });
}

// Bitwise equality; the first difference goes to stderr.
template <class T>
bool same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what,
          const char* side) {
  if (got.size() == want.size() &&
      (want.empty() || std::memcmp(got.data(), want.data(), want.size() * sizeof(T)) == 0))
    return true;
  const int rank = world_rank();
  if (got.size() != want.size()) {
    std::fprintf(stderr, "rank %d: %s: %s has %zu elements, expected %zu\n", rank, what.c_str(),
                 side, got.size(), want.size());
    return false;
  }
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::fprintf(stderr, "rank %d: %s: %s differs at element %zu: %g, expected %g\n", rank,
                   what.c_str(), side, i, static_cast<double>(to_float(got[i])),
                   static_cast<double>(to_float(want[i])));
      break;
    }
  return false;
}

// Checks run and failed.
struct tally {
  int checks = 0, failures = 0;
  tally& operator+=(const tally& t) {
    checks += t.checks;
    failures += t.failures;
    return *this;
  }
};

// One mode and shard-group size: the CPU and GPU communicators and a stream per stream_id.
struct setup {
  const char* mode_name;
  gpu_comm_mode mode;
  int64_t shard_group;
  const comm_groups& cpu;
  const gpu_comm_groups& gpu;
  cudaStream_t streams[kStreamCount];
  tally counted;

  cudaStream_t stream(stream_id s) const { return streams[static_cast<int>(s)]; }
  const gpu_comm& comm(stream_id s, comm_group g) const { return gpu_comm_of(gpu, s, g); }
  MPI_Comm cpu_comm(stream_id s, comm_group g) const {
    return cpu.comm[static_cast<int>(s)][static_cast<int>(g)];
  }
  expected_group group(comm_group g) const {
    return group_of(g, static_cast<int>(cpu.rank), static_cast<int>(cpu.world),
                    static_cast<int>(shard_group));
  }
  std::string label(const std::string& what) const {
    return std::string(mode_name) + " S=" + std::to_string(shard_group) + " " + what;
  }
  std::string label(comm_group g, const char* op, dtype_id t, int64_t n) const {
    return label(std::string(group_name(g)) + "(" + std::to_string(group(g).members.size()) +
                 " ranks) " + op + " " + dtype_name(t) + " " + std::to_string(n) + " elems");
  }
  // Agrees on every rank's result; rank 0 prints the line.
  void report(const std::string& what, bool ok) {
    const bool all_ok = all_ranks(ok);
    ++counted.checks;
    if (!all_ok) ++counted.failures;
    if (cpu.rank == 0) {
      std::printf("%s %s\n", all_ok ? "ok  " : "FAIL", what.c_str());
      std::fflush(stdout);
    }
  }
};

// The communicator holds the expected group's size and this rank's place in it.
bool placed(const gpu_comm& c, const expected_group& e, const std::string& what) {
  if (c.size == static_cast<int>(e.members.size()) && c.rank == e.index) return true;
  std::fprintf(stderr,
               "rank %d: %s: communicator of %d ranks with this rank at %d, expected %zu and %d\n",
               world_rank(), what.c_str(), c.size, c.rank, e.members.size(), e.index);
  return false;
}

// Issues `issue(send, recv)` on the device copies of send and a recv of
// recv_elems (one buffer when in place), waits for stream s, returns recv.
template <class T>
std::vector<T> on_gpu(const std::vector<T>& send, size_t recv_elems, bool in_place, cudaStream_t s,
                      const std::function<void(const void*, void*)>& issue) {
  device_buffer d_send(send.size() * sizeof(T));
  device_buffer d_recv(in_place ? 0 : recv_elems * sizeof(T));
  upload(d_send.get(), send);
  void* recv = in_place ? d_send.get() : d_recv.get();
  issue(d_send.get(), recv);
  CUDA_CHECK(cudaStreamSynchronize(s));
  return download<T>(recv, recv_elems);
}

template <class T>
void check_all_gather(setup& st, comm_group grp, int64_t n) {
  const gpu_comm& c = st.comm(stream_id::allgather, grp);
  const expected_group e = st.group(grp);
  const int rank = static_cast<int>(st.cpu.rank);
  const std::vector<T> send = values<T>(n, [&](int64_t i) { return gather_value(rank, i); });
  const std::vector<T> want = gathered<T>(e, n);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  const std::string what = st.label(grp, "all_gather", dtype_of<T>(), n);
  if (!all_ranks(placed(c, e, what))) {  // skipped on every rank, or on none
    st.report(what, false);
    return;
  }

  std::vector<T> cpu(want.size());
  comm_all_gather(st.cpu_comm(stream_id::allgather, grp), send.data(), cpu.data(), bytes);
  gpu_exec g;
  g.stream = st.stream(stream_id::allgather);
  const std::vector<T> gpu =
      on_gpu(send, want.size(), false, g.stream,
             [&](const void* s, void* r) { comm_all_gather(c, s, r, bytes, g); });
  const bool cpu_ok = same(cpu, want, what, "CPU");
  st.report(what, same(gpu, want, what, "GPU") && cpu_ok);
}

template <class T>
void check_reduce_scatter(setup& st, comm_group grp, int64_t n) {
  const gpu_comm& c = st.comm(stream_id::reducescatter, grp);
  const expected_group e = st.group(grp);
  const int rank = static_cast<int>(st.cpu.rank);
  const auto size = static_cast<int64_t>(e.members.size());
  const std::vector<T> send = values<T>(n * size, [&](int64_t j) { return reduce_input(rank, j); });
  const std::vector<T> want = summed<T>(e, e.index * n, n);
  const std::string what = st.label(grp, "reduce_scatter", dtype_of<T>(), n);
  if (!all_ranks(placed(c, e, what))) {  // skipped on every rank, or on none
    st.report(what, false);
    return;
  }

  std::vector<T> cpu(want.size());
  comm_reduce_scatter(st.cpu_comm(stream_id::reducescatter, grp), send.data(), cpu.data(), n,
                      dtype_of<T>());
  gpu_exec g;
  g.stream = st.stream(stream_id::reducescatter);
  const std::vector<T> gpu =
      on_gpu(send, want.size(), false, g.stream,
             [&](const void* s, void* r) { comm_reduce_scatter(c, s, r, n, dtype_of<T>(), g); });
  const bool cpu_ok = same(cpu, want, what, "CPU");
  st.report(what, same(gpu, want, what, "GPU") && cpu_ok);
}

template <class T>
void check_all_reduce(setup& st, comm_group grp, int64_t n, bool in_place) {
  const gpu_comm& c = st.comm(stream_id::allreduce, grp);
  const expected_group e = st.group(grp);
  const int rank = static_cast<int>(st.cpu.rank);
  const std::vector<T> send = values<T>(n, [&](int64_t j) { return reduce_input(rank, j); });
  const std::vector<T> want = summed<T>(e, 0, n);
  const std::string what =
      st.label(grp, in_place ? "all_reduce in place" : "all_reduce", dtype_of<T>(), n);
  if (!all_ranks(placed(c, e, what))) {  // skipped on every rank, or on none
    st.report(what, false);
    return;
  }

  std::vector<T> cpu = send;
  comm_all_reduce(st.cpu_comm(stream_id::allreduce, grp), cpu.data(), cpu.data(), n, dtype_of<T>());
  gpu_exec g;
  g.stream = st.stream(stream_id::allreduce);
  const std::vector<T> gpu =
      on_gpu(send, want.size(), in_place, g.stream,
             [&](const void* s, void* r) { comm_all_reduce(c, s, r, n, dtype_of<T>(), g); });
  const bool cpu_ok = same(cpu, want, what, "CPU");
  st.report(what, same(gpu, want, what, "GPU") && cpu_ok);
}

// As a hybrid step issues them: an all-gather (shard, fp32), a reduce-scatter
// (shard, bf16) and an all-reduce (replica, fp32) on their own streams, all
// issued before any is waited for.
void check_concurrent(setup& st, int64_t n) {
  const expected_group shard = st.group(comm_group::shard);
  const expected_group replica = st.group(comm_group::replica);
  const int rank = static_cast<int>(st.cpu.rank);
  const auto shard_size = static_cast<int64_t>(shard.members.size());
  const auto ag_send = values<float>(n, [&](int64_t i) { return gather_value(rank, i); });
  const auto rs_send =
      values<bf16>(n * shard_size, [&](int64_t j) { return reduce_input(rank, j); });
  const auto ar_send = values<float>(n, [&](int64_t j) { return reduce_input(rank, j); });
  const auto ag_want = gathered<float>(shard, n);
  const auto rs_want = summed<bf16>(shard, shard.index * n, n);
  const auto ar_want = summed<float>(replica, 0, n);

  device_buffer ag_in(ag_send.size() * 4), ag_out(ag_want.size() * 4);
  device_buffer rs_in(rs_send.size() * 2), rs_out(rs_want.size() * 2);
  device_buffer ar_in(ar_send.size() * 4), ar_out(ar_want.size() * 4);
  upload(ag_in.get(), ag_send);
  upload(rs_in.get(), rs_send);
  upload(ar_in.get(), ar_send);
  gpu_exec g;
  g.stream = st.stream(stream_id::allgather);
  comm_all_gather(st.comm(stream_id::allgather, comm_group::shard), ag_in.get(), ag_out.get(),
                  n * 4, g);
  g.stream = st.stream(stream_id::reducescatter);
  comm_reduce_scatter(st.comm(stream_id::reducescatter, comm_group::shard), rs_in.get(),
                      rs_out.get(), n, dtype_id::bf16, g);
  g.stream = st.stream(stream_id::allreduce);
  comm_all_reduce(st.comm(stream_id::allreduce, comm_group::replica), ar_in.get(), ar_out.get(), n,
                  dtype_id::fp32, g);
  for (stream_id s : kCollectiveStreams)
    CUDA_CHECK(cudaStreamSynchronize(st.stream(s)));

  const std::string what = st.label("concurrent all_gather, reduce_scatter and all_reduce " +
                                    std::to_string(n) + " elems");
  const bool ag_ok = same(download<float>(ag_out.get(), ag_want.size()), ag_want, what, "AG");
  const bool rs_ok = same(download<bf16>(rs_out.get(), rs_want.size()), rs_want, what, "RS");
  const bool ar_ok = same(download<float>(ar_out.get(), ar_want.size()), ar_want, what, "AR");
  st.report(what, ag_ok && rs_ok && ar_ok);
}

// NCCL: an all-reduce captured in a CUDA graph and replayed twice.
void check_graph_replay(setup& st, int64_t n) {
  const gpu_comm& c = st.comm(stream_id::allreduce, comm_group::world);
  const int rank = static_cast<int>(st.cpu.rank);
  const auto send = values<float>(n, [&](int64_t j) { return reduce_input(rank, j); });
  const auto want = summed<float>(st.group(comm_group::world), 0, n);
  device_buffer in(send.size() * 4), out(want.size() * 4);
  upload(in.get(), send);
  gpu_exec g;
  g.stream = st.stream(stream_id::allreduce);
  CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  try {
    comm_all_reduce(c, in.get(), out.get(), n, dtype_id::fp32, g);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(g.stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    throw;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(g.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const std::string what = st.label("all_reduce fp32 captured in a CUDA graph, replayed twice");
  bool ok = true;
  for (int replay = 0; replay < 2; ++replay) {
    CUDA_CHECK(cudaMemset(out.get(), 0, want.size() * 4));
    CUDA_CHECK(cudaGraphLaunch(exec, g.stream));
    CUDA_CHECK(cudaStreamSynchronize(g.stream));
    ok = same(download<float>(out.get(), want.size()), want, what, "GPU") && ok;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  st.report(what, ok);
}

// mpi_test: a collective larger than the staging is refused before any copy or MPI call.
void check_staging_overflow(setup& st) {
  const gpu_comm& c = st.comm(stream_id::allgather, comm_group::shard);
  gpu_exec g;
  g.stream = st.stream(stream_id::allgather);
  std::string error;
  try {
    comm_all_gather(c, nullptr, nullptr, c.staging_bytes / 2 + 1, g);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  st.report(st.label("refuses a collective larger than its staging"),
            error.find("staging") != std::string::npos);
}

// mpi_test: a collective issued while its stream is being captured is
// refused, and the capture ends cleanly.
void check_capture_refused(setup& st) {
  const gpu_comm& c = st.comm(stream_id::allreduce, comm_group::world);
  device_buffer buf(4);
  CUDA_CHECK(cudaMemset(buf.get(), 0, 4));
  gpu_exec g;
  g.stream = st.stream(stream_id::allreduce);
  CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  std::string error;
  try {
    comm_all_reduce(c, buf.get(), buf.get(), 1, dtype_id::fp32, g);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(g.stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  st.report(st.label("refuses CUDA graph capture"),
            error.find("CUDA graph") != std::string::npos && end == cudaSuccess);
}

// Every check of one mode and shard-group size.
tally check_mode(const char* mode_name, gpu_comm_mode mode, int64_t world, int64_t shard_group) {
  const fake_program p(world, shard_group);
  comm_groups cpu = comm_create(shard_group);
  gpu_comm_groups gpu = gpu_comm_create(p.get(), mode, cpu);
  setup st{mode_name, mode, shard_group, cpu, gpu, {}, {}};
  for (cudaStream_t& s : st.streams)
    CUDA_CHECK(cudaStreamCreate(&s));

  for (comm_group grp : kGroups)
    for (int64_t n : kCounts) {
      check_all_gather<float>(st, grp, n);
      check_all_gather<bf16>(st, grp, n);
      check_reduce_scatter<float>(st, grp, n);
      check_reduce_scatter<bf16>(st, grp, n);
      check_all_reduce<float>(st, grp, n, false);
      check_all_reduce<bf16>(st, grp, n, false);
      check_all_reduce<float>(st, grp, n, true);
      check_all_reduce<bf16>(st, grp, n, true);
    }
  check_concurrent(st, kMaxCount);
  if (mode == gpu_comm_mode::nccl) {
    check_graph_replay(st, kCounts[0]);
    gpu_comm_check_async(gpu);
  } else {
    check_staging_overflow(st);
    check_capture_refused(st);
  }

  for (cudaStream_t s : st.streams)
    CUDA_CHECK(cudaStreamDestroy(s));
  gpu_comm_destroy(gpu);
  comm_destroy(cpu);
  return st.counted;
}

// Ranks sharing a GPU: NCCL mode is refused on every rank, and the ranks
// short of a GPU name the test mode.
tally check_nccl_refused(int rank) {
  bool agreed = false;
  std::string message;
  try {
    gpu_select_device(gpu_comm_mode::nccl);
  } catch (const agreed_error& e) {
    agreed = true;
    if (e.own) message = e.what();
  }
  const bool ok =
      agreed && (message.empty() || message.find("--comm mpi-test") != std::string::npos);
  if (!message.empty()) std::printf("rank %d: nccl mode refused: %s\n", rank, message.c_str());
  const bool all_ok = all_ranks(ok);
  if (rank == 0)
    std::printf("%s nccl mode is refused on every rank when ranks share a GPU\n",
                all_ok ? "ok  " : "FAIL");
  std::fflush(stdout);
  return tally{1, all_ok ? 0 : 1};
}

int run() {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));

  // Every rank must have a GPU, or every rank skips.
  const std::string reason = no_device_reason();
  std::vector<int> usable(static_cast<size_t>(world));
  int mine = reason.empty() ? 1 : 0;
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, usable.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int first_unusable = -1;
  for (int r = world - 1; r >= 0; --r)
    if (!usable[static_cast<size_t>(r)]) first_unusable = r;
  if (first_unusable >= 0) {
    if (rank == 0 && first_unusable == 0) std::printf("no CUDA device: %s\n", reason.c_str());
    if (rank == 0 && first_unusable != 0)
      std::printf("no CUDA device: on rank %d (its reason follows)\n", first_unusable);
    std::fflush(stdout);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == first_unusable && rank != 0)
      std::printf("rank %d: no CUDA device: %s\n", rank, reason.c_str());
    return 77;
  }
  if (world > kMaxWorld) {
    if (rank == 0)
      std::printf("error: run on at most %d ranks (sums must stay exact in bf16)\n", kMaxWorld);
    return 1;
  }

  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  const bool nccl_possible = all_ranks(local_size() <= count);
  tally all;
  for (int64_t s = 1; s <= world; ++s) {
    if (world % s != 0) continue;
    gpu_select_device(gpu_comm_mode::mpi_test);
    all += check_mode("mpi_test", gpu_comm_mode::mpi_test, world, s);
    if (nccl_possible) {
      gpu_select_device(gpu_comm_mode::nccl);
      all += check_mode("nccl", gpu_comm_mode::nccl, world, s);
    }
  }
  if (!nccl_possible) all += check_nccl_refused(rank);
  if (rank == 0) std::printf("%d check(s) run, %d failed\n", all.checks, all.failures);
  return all.failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_check_main(argc, argv, run);
}
