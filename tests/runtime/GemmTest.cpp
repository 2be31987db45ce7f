// GemmTest: gemm (runtime/cpu/gemm.h) against the double-precision reference
// (Reference.h), for every mix of fp32, bf16 and fp16 operands and output,
// every transpose, beta, padded leading dimensions and workspace sizes.
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "tests/runtime/KernelCases.h"
#include "tests/runtime/Reference.h"

using ref::load;
using ref::quantize;
using ref::random_vec;
using ref::store;
using ref::vec;

namespace {

using kernel_cases::default_workspace;

template <class A, class B, class C>
struct gemm_types {
  using TA = A;
  using TB = B;
  using TC = C;
};
using GemmTypes = ::testing::Types<
    gemm_types<float, float, float>, gemm_types<float, float, bf16>, gemm_types<float, bf16, float>,
    gemm_types<float, bf16, bf16>, gemm_types<bf16, float, float>, gemm_types<bf16, float, bf16>,
    gemm_types<bf16, bf16, float>, gemm_types<bf16, bf16, bf16>, gemm_types<float, float, fp16>,
    gemm_types<float, fp16, float>, gemm_types<fp16, float, fp16>, gemm_types<fp16, fp16, float>,
    gemm_types<fp16, fp16, fp16>>;
struct GemmTypeNames {
  template <class P>
  static std::string GetName(int) {
    return std::string(ref::type_name<typename P::TA>()) + "_" + ref::type_name<typename P::TB>() +
           "_" + ref::type_name<typename P::TC>();
  }
};
template <class P>
class GemmTest : public ::testing::Test {};
TYPED_TEST_SUITE(GemmTest, GemmTypes, GemmTypeNames);

// One gemm call on random data with padded leading dimensions, against the
// double reference; fp32 output to 1e-5 (relative to the sum of |terms|),
// bf16 output to its rounding 2^-8 of that, fp16 output to 2^-10.
template <class TA, class TB, class TC>
void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                int64_t pad, const gemm_workspace& ws, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + pad;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + pad;
  const int64_t ldc = N + pad;
  const vec a = quantize<TA>(random_vec(rng, a_rows * lda));
  const vec b = quantize<TB>(random_vec(rng, b_rows * ldb));
  const vec c0 = quantize<TC>(random_vec(rng, M * ldc));
  auto A = store<TA>(a);
  auto B = store<TB>(b);
  auto C = store<TC>(c0);
  gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, ws);
  vec want = c0, got = load(C), scale(M * ldc, 0.0);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; k++) {
        const double x = ta ? a[k * lda + i] : a[i * lda + k];
        const double y = tb ? b[j * ldb + k] : b[k * ldb + j];
        s += x * y;
        mag += std::abs(x * y);
      }
      want[i * ldc + j] = alpha * s + beta * c0[i * ldc + j];
      scale[i * ldc + j] = std::abs(alpha) * mag + std::abs(beta * c0[i * ldc + j]);
    }
  // Errors relative to the magnitude of the summed terms; the padding must be untouched.
  const double rel = sizeof(TC) == 4 ? 1e-5 : std::is_same_v<TC, fp16> ? 1.0 / 1024 : 1.0 / 256;
  vec got_scaled(got.size()), want_scaled(want.size());
  for (size_t i = 0; i < got.size(); i++) {
    const double s = scale[i] > 0 ? scale[i] : 1.0;
    got_scaled[i] = got[i] / s;
    want_scaled[i] = want[i] / s;
  }
  ref::expect_close(std::string("gemm<") + ref::type_name<TA>() + "," + ref::type_name<TB>() + "," +
                        ref::type_name<TC>() + "> " + (ta ? "T" : "N") + (tb ? "T" : "N") +
                        " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                        " K=" + std::to_string(K) + " beta=" + std::to_string(beta),
                    got_scaled, want_scaled, rel, 0.0);
}

TYPED_TEST(GemmTest, AllTransposesAndBeta) {
  using P = TypeParam;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.75f})
        check_gemm<typename P::TA, typename P::TB, typename P::TC>(ta, tb, 7, 9, 11, 1.5f, beta, 3,
                                                                   default_workspace(), 11);
}

TYPED_TEST(GemmTest, ManyTilesInSmallWorkspace) {
  using P = TypeParam;
  // Room for 16x16x16 tiles only: M, N, K all split, with ragged last tiles.
  std::vector<float> buf(3 * 16 * 16);
  const gemm_workspace ws{buf.data(), static_cast<int64_t>(buf.size())};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      check_gemm<typename P::TA, typename P::TB, typename P::TC>(ta, tb, 37, 45, 53, 0.5f, 0.25f, 2,
                                                                 ws, 12);
}

TEST(Gemm, LongDimensionsFitDefaultWorkspace) {
  check_gemm<bf16, bf16, bf16>(false, true, 3, 2, 50000, 1.0f, 0.0f, 0, default_workspace(), 13);
  check_gemm<bf16, bf16, bf16>(false, false, 2, 50000, 3, 1.0f, 1.0f, 0, default_workspace(), 14);
  check_gemm<bf16, float, bf16>(true, false, 9000, 2, 3, 1.0f, 0.0f, 1, default_workspace(), 15);
}

TEST(Gemm, TooSmallWorkspaceThrows) {
  std::vector<float> buf(100);
  const gemm_workspace small{buf.data(), static_cast<int64_t>(buf.size())};
  std::vector<bf16> a(64 * 64), b(64 * 64), c(64 * 64);
  try {
    gemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(), 64, small);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("workspace of 100 floats is too small"), std::string::npos) << msg;
    EXPECT_NE(msg.find("M=64 N=64 K=64"), std::string::npos) << msg;
  }
  EXPECT_THROW(gemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(), 64,
                    gemm_workspace{}),
               std::runtime_error);
  // All-fp32 GEMMs need no workspace.
  std::vector<float> fa(4, 1.0f), fb(4, 1.0f), fc(4, 0.0f);
  gemm(false, false, 2, 2, 2, 1.0f, fa.data(), 2, fb.data(), 2, 0.0f, fc.data(), 2,
       gemm_workspace{});
  EXPECT_EQ(fc, std::vector<float>(4, 2.0f));
}

}  // namespace
