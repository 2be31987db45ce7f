// KernelCases: what the CPU kernel tests (GemmTest, KernelForwardTest,
// KernelBackwardTest) share: the default gemm workspace, the storage types of
// the typed suites, and the attention shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "tests/runtime/Reference.h"

namespace kernel_cases {

inline const gemm_workspace& default_workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  static const gemm_workspace ws{buf.data(), static_cast<int64_t>(buf.size())};
  return ws;
}

using StorageTypes = ::testing::Types<float, bf16, fp16>;
using StorageGradTypes =
    ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<float, bf16>,
                     ref::storage_grad<bf16, float>, ref::storage_grad<bf16, bf16>,
                     ref::storage_grad<float, fp16>, ref::storage_grad<fp16, float>,
                     ref::storage_grad<fp16, fp16>>;

// Attention shapes: one row block of the (T, T) products, and T = 70 for two
// row blocks of which the last is ragged.
struct attention_shape {
  int64_t B, T, C, H;
};
inline const attention_shape kAttentionShapes[] = {{2, 8, 16, 4}, {1, 70, 8, 2}};

inline std::string attention_tag(const attention_shape& a) {
  return " (T=" + std::to_string(a.T) + ")";
}

// Flash attention shapes: the materialized shapes (one and two row blocks),
// B*H = 6 heads of 48 with a T that is no multiple of 8 or 32, and the
// largest head size the CPU kernels take.
inline const attention_shape kFlashShapes[] = {
    {2, 8, 16, 4}, {1, 70, 8, 2}, {3, 37, 96, 2}, {1, 9, kAttentionFlashMaxHeadSize, 1}};

inline std::string flash_tag(const attention_shape& a) {
  return " (B=" + std::to_string(a.B) + " T=" + std::to_string(a.T) +
         " hs=" + std::to_string(a.C / a.H) + ")";
}

}  // namespace kernel_cases
