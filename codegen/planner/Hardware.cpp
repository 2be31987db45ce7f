// Hardware: the known descriptions and their sources.
//
// Conventions for every GPU below:
//  - Peaks are the datasheets' dense figures (no 2:4 sparsity).
//  - gemm_max_efficiency = (fraction of peak large bf16 GEMMs reach in cuBLAS)
//    x (fraction of a GPT block's time spent in GEMMs at large width). The
//    second factor is estimated, not measured: for a GPT-175B block at
//    T = 2048 the non-GEMM kernels (LayerNorm, GELU, softmax over the
//    materialized T x T probabilities, residual adds) move ~3 GB per forward
//    against ~7.6e12 GEMM FLOPs, i.e. ~7% of the block's time on an A100 and
//    about twice that share where FLOPs grow faster than bandwidth (H100).
//  - gemm_half_flops: a GEMM of this many FLOPs reaches half the large-GEMM
//    rate; it is the rate times ~3.5 us of fixed per-kernel cost (launch,
//    wave-quantization tail), so cuBLAS reaches ~60% of peak at 1024^3.
//  - memory_bytes_per_s = 0.85 x the datasheet HBM bandwidth, what
//    STREAM-like kernels (BabelStream) reach.
//  - Link busbw: nccl-tests' bus bandwidth. NVLink figures are measured ones;
//    network figures are 80% of the NICs' line rate per node, the fraction
//    NVLink reaches too (A100: 235 of 300 GB/s per direction).
//  - Latencies follow NCCL's tuning model (src/graph/tuning.cc, ring, LL
//    protocol, which NCCL picks when latency dominates): base 3.6 us per call,
//    0.6 us per NVLink hop, 2.7 us per InfiniBand hop.
//  - launch_overhead_s: an op of the schedule is ~10 kernels; back-to-back
//    kernels queued ahead (or in a CUDA graph) leave ~1 us gaps on the GPU.
#include "codegen/planner/Hardware.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr double kUs = 1e-6;
constexpr double kStreamFraction = 0.85;  // achievable / datasheet memory bandwidth

// NVIDIA A100 SXM4 in an 8-GPU node with NVSwitch: DGX A100, or AWS
// p4d.24xlarge (40 GB) / p4de.24xlarge (80 GB), the instances of the FSDP
// 1T blog (Belevich et al., "Training a 1 Trillion Parameter Model With
// PyTorch FSDP on AWS", 2022).
Hardware a100(std::string name, std::string description, int64_t memory_mib, double hbm_gb_per_s) {
  Hardware h;
  h.name = std::move(name);
  h.description = std::move(description);
  // A100 datasheet: 312 TFLOPS bf16/fp16 dense, 19.5 fp32 (156 TF32, unused:
  // fp32 specs compute in IEEE fp32).
  h.peak_bf16_flops = 312 * kTFLOPS;
  h.peak_fp16_flops = 312 * kTFLOPS;
  h.peak_fp32_flops = 19.5 * kTFLOPS;
  // Large bf16 GEMMs reach ~0.88 of peak (~275 TFLOPS); GEMMs are ~93% of a
  // large GPT block's time: 0.88 * 0.93 = 0.82, rounded down.
  h.gemm_max_efficiency = 0.80;
  h.gemm_half_flops = 1.0e9;           // 3.5 us at ~275 TFLOPS
  h.memory_bytes = memory_mib * kMiB;  // nvidia-smi's total
  h.memory_bytes_per_s = kStreamFraction * hbm_gb_per_s * kGB;
  // nccl-tests all_reduce busbw on one 8-GPU node: 230.8 GB/s at 1 GiB on a
  // p4d node (NVIDIA/nccl#527); NCCL's tuning model caps sm80 rings at 235 GB/s.
  h.intra_node = {235 * kGB, 0.6 * kUs};
  // p4d/p4de: 4 x 100 Gb/s EFA = 50 GB/s per node; 80% of it is 40 GB/s.
  // (NVIDIA/nccl#527 measured as little as 30 GB/s on 3-4 p4d nodes with
  // NCCL 2.9.9.) EFA's latency is above InfiniBand's: we take NCCL's
  // Simple-protocol network hop, 9.6 us.
  h.inter_node = {40 * kGB, 9.6 * kUs};
  h.collective_base_latency_s = 3.6 * kUs;
  // PCIe Gen4 x16: 32 GB/s per direction raw; pinned cudaMemcpy reaches ~25.
  h.host_link_bytes_per_s = 25 * kGB;
  // p4d: 2 x Xeon 8275CL, 6 channels of DDR4-2933 each = 282 GB/s per node,
  // 35 GB/s per GPU; ~60% achievable.
  h.host_memory_bytes_per_s = 20 * kGB;
  // p4d/p4de: 1152 GiB of RAM per node of 8 GPUs.
  h.host_memory_bytes = int64_t{1152} / 8 << 30;
  h.launch_overhead_s = 10 * kUs;
  h.sources = {"datasheet",
               "estimate: cuBLAS's large-GEMM share x a block's GEMM share",
               "datasheet; bandwidth 0.85 x datasheet (BabelStream-like)",
               "nccl-tests busbw on p4d, NVIDIA/nccl#527",
               "estimate: 80% of 4 x 100 Gb/s EFA line rate",
               "NCCL's tuning model (src/graph/tuning.cc); launch gap estimate",
               "estimate from PCIe 4 and the node's DDR4; RAM: AWS p4d/p4de, 1152 GiB per node"};
  return h;
}

// The FSDP paper's cluster (Zhao et al., "PyTorch FSDP: Experiences on
// Scaling Fully Sharded Data Parallel", VLDB 2023, section 6): A100 80GB
// nodes of 8 GPUs "interconnected by a 2 Tb/s RoCE network". The GPUs and
// the node are a DGX A100-like 80 GB node (a100() above); the network is
// 2 Tb/s = 250 GB/s per node of line rate, of which we take the same 80%
// busbw fraction as for EFA (NVLink reaches 235 of 300 GB/s too): 200 GB/s.
// RoCE v2 adds Ethernet switching to InfiniBand's ~2.7 us per hop: we take
// 5 us, an estimate (latency matters little at GPT-175B's message sizes).
Hardware a100_roce() {
  Hardware h = a100("a100-80g-roce",
                    "NVIDIA A100 SXM4 80GB, 8 per node (NVLink 3), 2 Tb/s RoCE per node (the FSDP "
                    "paper's cluster)",
                    81920, 2039);
  h.inter_node = {200 * kGB, 5 * kUs};
  h.sources.inter_node = "estimate: 80% of the paper's 2 Tb/s RoCE per node (Zhao et al. 2023)";
  return h;
}

// NVIDIA H100 SXM5 / H200 SXM in an 8-GPU HGX node (DGX H100, AWS p5/p5e):
// NVLink 4 through NVSwitch, 8 x 400 Gb/s NICs per node.
Hardware hopper(std::string name, std::string description, int64_t memory_mib, double hbm_gb_per_s,
                double gemm_max_efficiency) {
  Hardware h;
  h.name = std::move(name);
  h.description = std::move(description);
  // H100 SXM datasheet: 989 TFLOPS bf16/fp16 dense (1979 with sparsity),
  // 67 fp32. The H200 has the same compute.
  h.peak_bf16_flops = 989 * kTFLOPS;
  h.peak_fp16_flops = 989 * kTFLOPS;
  h.peak_fp32_flops = 67 * kTFLOPS;
  h.gemm_max_efficiency = gemm_max_efficiency;
  h.gemm_half_flops = 2.7e9;  // 3.5 us at ~770 TFLOPS
  h.memory_bytes = memory_mib * kMiB;
  h.memory_bytes_per_s = kStreamFraction * hbm_gb_per_s * kGB;
  // NVLink 4: 450 GB/s per direction per GPU; nccl-tests ring busbw on 8
  // GPUs is ~360 GB/s (more with NVLS, which this model does not assume).
  h.intra_node = {360 * kGB, 0.6 * kUs};
  // 8 x 400 Gb/s InfiniBand NDR (or 3200 Gb/s EFA on p5) = 400 GB/s per node; 80%.
  h.inter_node = {320 * kGB, 2.7 * kUs};
  h.collective_base_latency_s = 3.6 * kUs;
  // PCIe Gen5 x16: 64 GB/s per direction raw; pinned copies reach ~50.
  h.host_link_bytes_per_s = 50 * kGB;
  // DGX H100: 2 x Xeon 8480C, 8 channels of DDR5-4800 each = 614 GB/s per
  // node, 77 GB/s per GPU; ~60% achievable.
  h.host_memory_bytes_per_s = 45 * kGB;
  // DGX H100/H200 and AWS p5: 2 TiB of RAM per node of 8 GPUs.
  h.host_memory_bytes = int64_t{2048} / 8 << 30;
  h.launch_overhead_s = 10 * kUs;
  h.sources = {"datasheet",
               "estimate: cuBLAS's large-GEMM share x a block's GEMM share",
               "datasheet; bandwidth 0.85 x datasheet (BabelStream-like)",
               "nccl-tests ring busbw on 8 GPUs, reported",
               "estimate: 80% of 8 x 400 Gb/s per node",
               "NCCL's tuning model (src/graph/tuning.cc); launch gap estimate",
               "estimate from PCIe 5 and the node's DDR5; RAM: DGX H100 and AWS p5, 2 TiB per "
               "node"};
  return h;
}

// A 2-core x86-64 machine like the development VMs (AMD EPYC, AVX-512),
// running one rank per core with the CPU runtime (OpenBLAS, MPI over shared
// memory). Nothing is measured at build time: these are conservative
// figures from the part's structure, chosen so that predictions err slow.
Hardware cpu() {
  Hardware h;
  h.name = "cpu";
  h.gpu = false;
  h.description = "one core of a 2-core x86-64 machine (AVX-512), one rank per core";
  // 2.5 GHz x 2 FMA pipes x 8 fp32 lanes (256-bit datapath) x 2 = 80 GFLOP/s.
  // bf16/fp16 are computed in fp32 after conversion: no faster.
  h.peak_fp32_flops = 80e9;
  h.peak_bf16_flops = h.peak_fp32_flops;
  h.peak_fp16_flops = h.peak_fp32_flops;
  // Single-threaded OpenBLAS sgemm reaches ~80% on large matrices; the
  // element-wise and attention kernels are plain loops: take half of peak.
  h.gemm_max_efficiency = 0.5;
  h.gemm_half_flops = 2e6;               // packing and call overhead, ~50 us at 40 GFLOP/s
  h.memory_bytes = 12 * 1024 * kMiB;     // half of a 24 GiB machine per rank
  h.host_memory_bytes = h.memory_bytes;  // the same RAM
  h.memory_bytes_per_s = 10 * kGB;       // one core's STREAM bandwidth, low end
  // MPI over shared memory: each ring step is two memcpys (~10 GB/s each),
  // and the comm thread shares the core with compute.
  h.intra_node = {4 * kGB, 1 * kUs};
  // 10 Gb/s Ethernet (TCP), 80% of line rate; ~50 us MPI latency.
  h.inter_node = {1 * kGB, 50 * kUs};
  h.collective_base_latency_s = 20 * kUs;  // waking the comm thread
  h.host_link_bytes_per_s = 10 * kGB;      // "device" and host are one memory: a memcpy
  h.host_memory_bytes_per_s = 10 * kGB;
  h.launch_overhead_s = 20 * kUs;  // handing an op to the worker threads
  h.sources = {"estimate from the core's structure",
               "estimate",
               "estimate (one core's STREAM, low end)",
               "estimate (MPI over shared memory)",
               "estimate (10 Gb/s Ethernet)",
               "estimate",
               "estimate"};
  return h;
}

std::vector<Hardware> build_known() {
  std::vector<Hardware> all = {
      // A100 80GB SXM4: 2039 GB/s HBM2e (datasheet); nvidia-smi reports 81920 MiB.
      a100("a100-80g",
           "NVIDIA A100 SXM4 80GB, 8 per node (NVLink 3), 4 x 100 Gb/s EFA per node (AWS p4de)",
           81920, 2039),
      // A100 40GB SXM4: 1555 GB/s HBM2 (datasheet); 40960 MiB. The FSDP 1T
      // blog's cluster (p4d.24xlarge).
      a100("a100-40g",
           "NVIDIA A100 SXM4 40GB, 8 per node (NVLink 3), 4 x 100 Gb/s EFA per node (AWS p4d, "
           "the FSDP 1T blog's cluster)",
           40960, 1555),
      a100_roce(),
      // H100 SXM5: 80 GB HBM3 at 3.35 TB/s (datasheet); nvidia-smi reports 81559 MiB.
      // Large GEMMs ~0.78 of peak (~770 TFLOPS); GEMMs ~88% of a large block: 0.69.
      hopper("h100-sxm",
             "NVIDIA H100 SXM5 80GB, 8 per node (NVLink 4), 8 x 400 Gb/s InfiniBand per node",
             81559, 3350, 0.68),
      // H200: 141 GB HBM3e at 4.8 TB/s (datasheet); nvidia-smi reports 143771 MiB.
      // Same GEMM rate as the H100 (bf16 GEMMs of ~790 TFLOPS are reported on
      // H200s); more bandwidth shrinks the non-GEMM share to ~9%: 0.78 * 0.91 = 0.71.
      hopper("h200",
             "NVIDIA H200 SXM 141GB, 8 per node (NVLink 4), 8 x 400 Gb/s InfiniBand per node",
             143771, 4800, 0.70),
      cpu(),
  };
  std::sort(all.begin(), all.end(),
            [](const Hardware& a, const Hardware& b) { return a.name < b.name; });
  return all;
}

std::string gb(double bytes) {
  return fmt::format("{:.1f} GB", bytes / kGB);
}

}  // namespace

double Hardware::peak_flops(DType d) const {
  switch (d) {
    case DType::BF16:
      return peak_bf16_flops;
    case DType::FP16:
      return peak_fp16_flops;
    case DType::FP32:
      return peak_fp32_flops;
  }
  return peak_fp32_flops;
}

double Hardware::gemm_efficiency(double flops) const {
  if (flops <= 0) return 0;
  return gemm_max_efficiency * flops / (flops + gemm_half_flops);
}

const std::vector<Hardware>& known_hardware() {
  static const std::vector<Hardware> all = build_known();
  return all;
}

std::vector<std::string_view> hardware_names() {
  std::vector<std::string_view> names;
  for (const Hardware& h : known_hardware())
    names.push_back(h.name);
  return names;
}

std::optional<Hardware> find_hardware(std::string_view name) {
  auto same = [](std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      return std::tolower(static_cast<unsigned char>(x)) ==
             std::tolower(static_cast<unsigned char>(y));
    });
  };
  for (const Hardware& h : known_hardware())
    if (same(h.name, name)) return h;
  return std::nullopt;
}

std::string unknown_hardware_error(std::string_view name) {
  const std::vector<std::string_view> names = hardware_names();
  // In any case: the names the word begins ('H100' -> 'h100-sxm'), else a
  // misspelling ('a100-80' -> 'a100-80g').
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::vector<std::string_view> guesses;
  if (!lower.empty())
    for (std::string_view n : names)
      if (n.starts_with(lower)) guesses.push_back(n);
  if (guesses.empty())
    if (std::string close = closest_match(lower, names); !close.empty())
      guesses.push_back(*std::find(names.begin(), names.end(), close));
  std::string out = fmt::format("unknown hardware '{}'", name);
  if (!guesses.empty()) out += fmt::format("; did you mean {}?", quoted_choices(guesses));
  out += fmt::format(" known: {}", quoted_choices(names, " and "));
  return out;
}

std::string print_hardware(const Hardware& h) {
  const Hardware::Sources& src = h.sources;
  auto from = [](const std::string& source) {
    return source.empty() ? std::string() : " (" + source + ")";
  };
  std::string out = fmt::format("hardware {}: {}\n", h.name, h.description);
  if (h.profile)
    out += fmt::format(
        "  op times      measured: profile {}; the figures below only where it "
        "has nothing comparable\n",
        h.profile_path);
  out += fmt::format("  peak dense    bf16 {:.1f}, fp16 {:.1f}, fp32 {:.1f} TFLOPS{}\n",
                     h.peak_bf16_flops / kTFLOPS, h.peak_fp16_flops / kTFLOPS,
                     h.peak_fp32_flops / kTFLOPS, from(src.peak));
  out += fmt::format("  efficiency    {:.2f} * f / (f + {:.3g}) per GEMM of f FLOPs{}\n",
                     h.gemm_max_efficiency, h.gemm_half_flops, from(src.efficiency));
  out += fmt::format("  memory        {} at {}/s{}\n", gb(static_cast<double>(h.memory_bytes)),
                     gb(h.memory_bytes_per_s), from(src.memory));
  out += fmt::format("  intra-node    busbw {}/s, {:.1f} us per hop{}\n",
                     gb(h.intra_node.busbw_bytes_per_s), h.intra_node.hop_latency_s / kUs,
                     from(src.intra_node));
  out += fmt::format("  inter-node    busbw {}/s, {:.1f} us per hop{}\n",
                     gb(h.inter_node.busbw_bytes_per_s), h.inter_node.hop_latency_s / kUs,
                     from(src.inter_node));
  out += fmt::format("  fixed costs   {:.1f} us per collective, {:.1f} us per op{}\n",
                     h.collective_base_latency_s / kUs, h.launch_overhead_s / kUs, from(src.fixed));
  out += fmt::format("  host          link {}/s per direction, memory {}/s, {} per rank{}\n",
                     gb(h.host_link_bytes_per_s), gb(h.host_memory_bytes_per_s),
                     gb(static_cast<double>(h.host_memory_bytes)), from(src.host));
  return out;
}

}  // namespace fsdpgen
