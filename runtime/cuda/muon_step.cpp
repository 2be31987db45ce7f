// muon_step (CUDA): the step functions of optimizer = muon(...) on the
// device (runtime/cuda/step.h), the twins of runtime/cpu/muon_step.cpp: the
// owners' gathers and scatters of matrix slices over the shard group's
// communicator, and the owners' Newton-Schulz.
#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/step.h"

namespace {

const std::byte* at(const void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<const std::byte*>(base) + elems * elem_bytes;
}
std::byte* at(void* base, int64_t elems, int64_t elem_bytes) {
  return static_cast<std::byte*>(base) + elems * elem_bytes;
}

// As runtime/cpu/muon_step.cpp: the owner's gradients after the unit's fp32 updates.
void* gathered_grad(void* gathered, const muon_unit_layout& l, const program_muon_matrix& m,
                    int64_t grad_bytes) {
  return at(at(gathered, l.gathered_elems, 4), m.gathered_offset, grad_bytes);
}
float* gathered_update(void* gathered, const program_muon_matrix& m) {
  return static_cast<float*>(gathered) + m.gathered_offset;
}

// One slice of an exchange: bytes from `from` (device) on this rank to
// peer, or into `to` (device) from peer.
struct slice_move {
  const void* from;
  void* to;
  int64_t bytes;
  int peer, tag;
};

void copy_on(void* to, const void* from, int64_t bytes, cudaMemcpyKind kind, gpu_exec& g) {
  CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), kind, g.stream));
}

// The test mode: the sends staged into the send half of the communicator's
// pinned memory, MPI point to point between the halves, the receives copied
// back; host-synchronous, as the mode's collectives are.
void exchange_mpi_test(const gpu_comm& comm, const std::vector<slice_move>& sends,
                       const std::vector<slice_move>& recvs, std::vector<MPI_Request>& requests,
                       int unit, const char* what, gpu_exec& g) {
  const int64_t half = comm.staging_bytes / 2;
  int64_t send_bytes = 0, recv_bytes = 0;
  for (const slice_move& s : sends)
    send_bytes += s.bytes;
  for (const slice_move& r : recvs)
    recv_bytes += r.bytes;
  if (send_bytes > half || recv_bytes > half)
    throw std::runtime_error(fmt::format(
        "unit {}: Muon's {} sends {} B and receives {} B, more than the test mode's staging of {} "
        "B each way",
        unit, what, send_bytes, recv_bytes, half));
  if (requests.size() < sends.size() + recvs.size())
    throw std::runtime_error(
        fmt::format("unit {}: Muon's {} has {} slices but the layout planned requests for {}", unit,
                    what, sends.size() + recvs.size(), requests.size()));
  std::byte* host_send = static_cast<std::byte*>(comm.staging);
  std::byte* host_recv = host_send + half;
  int64_t off = 0;
  for (const slice_move& s : sends) {
    copy_on(host_send + off, s.from, s.bytes, cudaMemcpyDeviceToHost, g);
    off += s.bytes;
  }
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  size_t n = 0;
  off = 0;
  for (const slice_move& r : recvs) {
    comm_irecv(comm.mpi, host_recv + off, r.bytes, r.peer, r.tag, requests[n++]);
    off += r.bytes;
  }
  off = 0;
  for (const slice_move& s : sends) {
    comm_isend(comm.mpi, host_send + off, s.bytes, s.peer, s.tag, requests[n++]);
    off += s.bytes;
  }
  for (size_t i = 0; i < n; ++i)
    comm_wait(requests[i]);
  off = 0;
  for (const slice_move& r : recvs) {
    copy_on(r.to, host_recv + off, r.bytes, cudaMemcpyHostToDevice, g);
    off += r.bytes;
  }
  CUDA_CHECK(cudaStreamSynchronize(g.stream));  // the staging is free for the next collective
}

// NCCL: one group of sends and receives on g.stream (capturable).
void exchange_nccl(const gpu_comm& comm, const std::vector<slice_move>& sends,
                   const std::vector<slice_move>& recvs, gpu_exec& g) {
  if (sends.empty() && recvs.empty()) return;
  NCCL_CHECK(ncclGroupStart());
  for (const slice_move& r : recvs)
    NCCL_CHECK(
        ncclRecv(r.to, static_cast<size_t>(r.bytes), ncclUint8, r.peer, comm.nccl, g.stream));
  for (const slice_move& s : sends)
    NCCL_CHECK(
        ncclSend(s.from, static_cast<size_t>(s.bytes), ncclUint8, s.peer, comm.nccl, g.stream));
  NCCL_CHECK(ncclGroupEnd());
}

void exchange(const gpu_comm& comm, const std::vector<slice_move>& sends,
              const std::vector<slice_move>& recvs, std::vector<MPI_Request>& requests, int unit,
              const char* what, gpu_exec& g) {
  if (comm.mode == gpu_comm_mode::mpi_test)
    exchange_mpi_test(comm, sends, recvs, requests, unit, what, g);
  else
    exchange_nccl(comm, sends, recvs, g);
}

muon_unit_layout& layout_of(step_context& c, int unit) {
  if (c.muon == nullptr)
    throw std::runtime_error(fmt::format(
        "unit {}: a Muon op ran without the Muon layout (the set-up builds it for optimizer = "
        "muon(...))",
        unit));
  return c.muon->units[static_cast<size_t>(unit)];
}

// The slice lists are rebuilt on the host at each call into vectors kept
// from call to call (cleared, their capacity kept: no allocation after the
// first step); they only describe work enqueued on the stream.
std::vector<slice_move>& cleared(std::vector<slice_move>& v) {
  v.clear();
  return v;
}

}  // namespace
void step_muon_gather(step_context& c, int unit, const void* grad_shard, void* gathered,
                      const gpu_comm& comm, gpu_exec& g) {
  const program& p = *c.p;
  muon_unit_layout& l = layout_of(c, unit);
  const int64_t gb = dtype_size(p.units[unit].grad_shard_dtype);
  static thread_local std::vector<slice_move> send_list, recv_list;
  std::vector<slice_move>& sends = cleared(send_list);
  std::vector<slice_move>& recvs = cleared(recv_list);
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    recvs.push_back({nullptr, at(gathered_grad(gathered, l, m, gb), t.matrix_begin, gb),
                     t.elems * gb, t.peer, t.matrix});
  }
  for (const muon_transfer& t : l.to_owners)
    sends.push_back({at(grad_shard, t.shard_offset, gb), nullptr, t.elems * gb, t.peer, t.matrix});
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    copy_on(at(gathered_grad(gathered, l, m, gb), t.matrix_begin, gb),
            at(grad_shard, t.shard_offset, gb), t.elems * gb, cudaMemcpyDeviceToDevice, g);
  }
  exchange(comm, sends, recvs, c.muon->gather_requests, unit, "gather", g);
}

void step_muon_orthogonalize(step_context& c, int unit, const void* grad_shard, void* gathered,
                             float* momentum, void* workspace, float* update_shard, gpu_exec& g) {
  const program& p = *c.p;
  const muon_unit_layout& l = layout_of(c, unit);
  const dtype_id gt = p.units[unit].grad_shard_dtype;
  const int64_t gb = dtype_size(gt);
  // s.lr is not read on the device (the step's lr is in g.scalars).
  const muon_settings s = muon_settings_of(p, c.lr);
  for (int k : l.owned) {
    const program_muon_matrix& m = p.muon_matrices[k];
    // Held whole (a shard group of one): the shard is the flat parameter.
    const void* grad =
        gathered ? gathered_grad(gathered, l, m, gb) : at(grad_shard, m.offset_elems, gb);
    float* update = gathered ? gathered_update(gathered, m) : update_shard + m.offset_elems;
    cuda_muon_orthogonalize(muon_matrix_of(m), s, p.train.clip, momentum + m.momentum_offset, grad,
                            gt, update, workspace, muon_workspace_bytes(m.rows, m.cols), g);
  }
}

void step_muon_scatter(step_context& c, int unit, const void* gathered, float* update_shard,
                       const gpu_comm& comm, gpu_exec& g) {
  const program& p = *c.p;
  muon_unit_layout& l = layout_of(c, unit);
  static thread_local std::vector<slice_move> send_list, recv_list;
  std::vector<slice_move>& sends = cleared(send_list);
  std::vector<slice_move>& recvs = cleared(recv_list);
  for (const muon_transfer& t : l.to_owners)
    recvs.push_back({nullptr, update_shard + t.shard_offset, t.elems * 4, t.peer, t.matrix});
  for (const muon_transfer& t : l.from_holders) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    sends.push_back({gathered_update(const_cast<void*>(gathered), m) + t.matrix_begin, nullptr,
                     t.elems * 4, t.peer, t.matrix});
  }
  for (const muon_transfer& t : l.local) {
    const program_muon_matrix& m = p.muon_matrices[t.matrix];
    copy_on(update_shard + t.shard_offset,
            gathered_update(const_cast<void*>(gathered), m) + t.matrix_begin, t.elems * 4,
            cudaMemcpyDeviceToDevice, g);
  }
  exchange(comm, sends, recvs, c.muon->scatter_requests, unit, "scatter", g);
}
