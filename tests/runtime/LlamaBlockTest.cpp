// LlamaBlockTest: a llama block (runtime/cpu/llama.h) run piece by piece, as
// the sub-block units of a schedule run it, against the whole block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <random>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/llama.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"
#include "tests/runtime/Reference.h"

using ref::random_vec;

// ---------------------------------------------------------------- sub-block units

namespace {

namespace model = fsdpgen::model;

// The tensors of pieces [first, end) of a llama block (the others null).
template <class Out>
Out only_llama_pieces(Out all, int first, int end) {
  Out p = all;
  auto keep = [&](auto& field, int piece) {
    if (piece < first || piece >= end) field = nullptr;
  };
  keep(p.rms1_w, kLlamaRms1), keep(p.q_w, kLlamaQ), keep(p.k_w, kLlamaK), keep(p.v_w, kLlamaV);
  keep(p.o_w, kLlamaO), keep(p.rms2_w, kLlamaRms2), keep(p.gate_w, kLlamaGate);
  keep(p.up_w, kLlamaUp), keep(p.down_w, kLlamaDown);
  keep(p.q_b, kLlamaQ), keep(p.k_b, kLlamaK), keep(p.v_b, kLlamaV);
  return p;
}

struct llama_block_result {
  std::vector<float> out, dinput, grads;
};

// One fp32 llama block (grouped-query attention, rotary positions) forward
// from x and backward from dout, a call per range of `pieces`, each given
// only its pieces' tensors.
llama_block_result run_llama_block(const std::vector<float>& params, const std::vector<float>& x,
                                   const std::vector<float>& dout, const llama_dims& d,
                                   const std::vector<block_pieces>& pieces) {
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  std::vector<std::byte> saved(model::slot_bytes(model::kLlamaBlockSaved, md, d.N(), 4));
  std::vector<std::byte> scratch(model::slot_bytes(model::kLlamaBackwardScratch, md, d.N(), 4));
  std::vector<float> cos(d.T * d.D() / 2), sin(cos.size()), grads(params.size(), 0.0f);
  rope_tables(cos.data(), sin.data(), d.T, d.D(), 10000.0, rope_scaling{});
  const llama_rope rope{cos.data(), sin.data()};
  static std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace ws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  const auto s = llama_block_saved_at<float>(saved.data(), d);
  const auto sc = llama_backward_scratch_at<float>(scratch.data(), d);
  std::copy(x.begin(), x.end(), s.input);
  const auto p = llama_block_params_at<float>(params.data(), d);
  const auto g = llama_block_grads_at<float>(grads.data(), d);
  std::vector<float> out(d.N() * d.C);
  for (const block_pieces& r : pieces)
    llama_block_forward(out.data(), only_llama_pieces(p, r.first, r.end), s, rope, d, ws, r);
  std::copy(dout.begin(), dout.end(), sc.dres);
  for (auto r = pieces.rbegin(); r != pieces.rend(); ++r)
    llama_block_backward(only_llama_pieces(g, r->first, r->end),
                         only_llama_pieces(p, r->first, r->end), s, sc, rope, d, ws, *r);
  return {out, std::vector<float>(sc.dres, sc.dres + d.N() * d.C), grads};
}

// The block of `d` run piece by piece equals it run whole.
void piece_by_piece_equals_the_whole_block(const llama_dims& d) {
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  const model::Table<model::Tensor> table = model::llama_params(d.qkv_bias).block;
  const int64_t n = model::offset_elems(table, table.count, md);
  std::mt19937 rng(43);
  std::vector<float> params(n);
  for (float& v : params)
    v = std::uniform_real_distribution<float>(-0.2f, 0.2f)(rng);
  const auto xd = random_vec(rng, d.N() * d.C), doutd = random_vec(rng, d.N() * d.C);
  const std::vector<float> x(xd.begin(), xd.end()), dout(doutd.begin(), doutd.end());
  const auto whole = run_llama_block(params, x, dout, d, {{}});
  const std::vector<block_pieces> each_linear = {{0, 2}, {2, 3}, {3, 4}, {4, 5},
                                                 {5, 7}, {7, 8}, {8, 9}};
  std::vector<block_pieces> each_piece;
  for (int i = 0; i < kLlamaPieces; ++i)
    each_piece.push_back({i, i + 1});
  for (const auto& split : {each_linear, each_piece}) {
    const auto parts = run_llama_block(params, x, dout, d, split);
    EXPECT_EQ(parts.out, whole.out) << split.size() << " ranges";
    EXPECT_EQ(parts.dinput, whole.dinput) << split.size() << " ranges";
    EXPECT_EQ(parts.grads, whole.grads) << split.size() << " ranges";
  }
  EXPECT_GT(std::count_if(whole.grads.begin(), whole.grads.end(), [](float v) { return v != 0; }),
            n / 2);
}

}  // namespace

// A llama block run piece by piece (each linear its own range, a norm with
// the linear after it; and every piece alone) equals the whole block bit for
// bit; and it is a block (d(input) is not zero, every gradient is touched).
// Llama's block and Qwen2's (qkv_bias: the biases in q's, k's and v's pieces).
TEST(LlamaBlock, PieceByPieceEqualsTheWholeBlock) {
  for (const bool qkv_bias : {false, true}) {
    SCOPED_TRACE(qkv_bias ? "qkv_bias" : "no biases");
    llama_dims d;
    d.B = 2, d.T = 8, d.C = 32, d.H = 4, d.KV_heads = 2, d.F = 48, d.V = 50;
    d.qkv_bias = qkv_bias;
    piece_by_piece_equals_the_whole_block(d);
  }
}
