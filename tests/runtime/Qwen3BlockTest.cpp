// Qwen3BlockTest: a llama block with qk_norm and a head size apart from
// width / heads (Qwen3's: each head's q and k pass an RMSNorm of one head's
// size before the rotation; q is heads * head_dim wide, o maps it back to the
// width; runtime/cpu/llama.h) against LlamaBlockReference.h's double-precision
// reference; d(input) and every parameter's gradient against central finite
// differences of the reference loss sum(out * R).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/llama.h"
#include "runtime/model/llama.h"
#include "tests/runtime/LlamaBlockReference.h"

namespace llama_cases {
namespace {

namespace model = fsdpgen::model;
using ref::vec;

// fp32 forward (out, and q, k, v as saved) and backward (d(input) and every
// gradient, accumulated onto prior values) against the reference: q 4 * 6 =
// 24 wide, k and v 12.
TEST(Qwen3Block, QkNormAndHeadDimMatchTheReference) {
  const llama_dims d = small_dims(false, false);
  ASSERT_EQ(d.Q(), 24);
  expect_block_matches_the_reference(d, "qwen3 block", 11);
}

// The layout: Llama's rows with q_norm_w and k_norm_w (one head's size) after
// q's and k's weights, each in its weight's piece; q and o sized by the head
// size, not the width.
TEST(Qwen3Block, NormRowsSitInTheirWeightsPieces) {
  const model::ParamLayout& qwen = model::llama_params(false, true);
  const model::ParamLayout& llama = model::llama_params(false);
  ASSERT_EQ(qwen.block.count, llama.block.count + 2);
  ASSERT_EQ(qwen.pieces.count, llama.pieces.count);
  for (const model::Tensor& t : llama.block) {
    EXPECT_NO_THROW(model::index_of(qwen.block, t.name)) << t.name;
  }
  for (const char* norm : {"q_norm_w", "k_norm_w"}) {
    EXPECT_THROW(model::index_of(llama.block, norm), std::logic_error) << norm;
  }
  for (size_t i = 0; i < qwen.pieces.count; ++i) {
    const model::Piece& p = qwen.pieces[i];
    EXPECT_STREQ(p.name, llama.pieces[i].name);
    const bool normed = i == kLlamaQ || i == kLlamaK;
    ASSERT_EQ(p.tensors, normed ? 2 : 1) << p.name;
    EXPECT_STREQ(qwen.block[p.first_tensor].name, llama.block[llama.pieces[i].first_tensor].name);
    if (normed) {
      EXPECT_STREQ(qwen.block[p.first_tensor + 1].hf_name,
                   (std::string(p.name).substr(0, 11) + "_norm.weight").c_str());
    }
    if (i + 1 < qwen.pieces.count) {
      EXPECT_EQ(p.first_tensor + p.tensors, qwen.pieces[i + 1].first_tensor) << p.name;
    }
  }
  // Qwen3-0.6B's shape: q is 16 * 128 = 2048 wide, o maps it to 1024.
  model::Dims d{1024, 3072, 16, 4096, 8 * 128, true};
  d.D = 128;
  const model::Tensor& q = qwen.block[model::index_of(qwen.block, "q_w")];
  const model::Tensor& o = qwen.block[model::index_of(qwen.block, "o_w")];
  const model::Tensor& qn = qwen.block[model::index_of(qwen.block, "q_norm_w")];
  EXPECT_EQ(q.shape.dims[0](d), 2048);
  EXPECT_EQ(q.shape.dims[1](d), 1024);
  EXPECT_EQ(o.shape.dims[0](d), 1024);
  EXPECT_EQ(o.shape.dims[1](d), 2048);
  EXPECT_EQ(qn.shape.elems(d), 128);
  EXPECT_EQ(qwen.pieces[kLlamaO].in(d)*qwen.pieces[kLlamaO].out(d), 2048 * 1024);
}

}  // namespace
}  // namespace llama_cases
