// Flops: per-layer forward FLOP counts.
#include "codegen/planner/Flops.h"

namespace fsdpgen {
namespace {

// Multiply-adds per token of a layer's matrix multiplies (its weight
// matrices; a custom layer's Flops count as half as many), the head's with V
// vocabulary rows.
double layer_matmul_macs(const ModelSpec& m, const LayerId& l, double V) {
  const double C = m.width, F = m.ffn_hidden;
  switch (l.kind) {
    case LayerId::Kind::Embed:
      return 0;
    case LayerId::Kind::Block:
      if (!l.whole()) return block_piece(m, l.piece).forward_flops_per_token / 2;
      if (!m.custom.empty()) {
        double macs = 0;
        for (const BlockPiece& p : model_block_pieces(m))
          macs += p.forward_flops_per_token / 2;
        return macs;
      }
      if (m.family == Family::Gpt2) return 4 * C * C + 2 * C * F;
      return 2 * C * static_cast<double>(m.q_width()) +
             2 * C * static_cast<double>(m.kv_heads * m.head_dim()) + 3 * C * F;
    case LayerId::Kind::FinalNorm:
      return 0;
    case LayerId::Kind::Head:
      return C * V;
  }
  return 0;
}

// The attention core's (its two matrix products per head), with the piece
// it runs with; a custom layer in its place counts it in its own Flops. Each
// query counts the whole context's keys (the usual convention, twice what the
// causal kernel does); in a sliding window W shorter than the context, W
// keys: what the windowed kernel does for each query past the first W.
double layer_attention_flops(const ModelSpec& m, const LayerId& l) {
  if (l.kind != LayerId::Kind::Block) return 0;
  bool attends = false;
  if (!l.whole())
    attends = block_piece(m, l.piece).attention;
  else
    for (const BlockPiece& p : model_block_pieces(m))
      attends |= p.attention;
  const int64_t window = m.attention_window();
  const double keys = static_cast<double>(window != 0 ? window : m.context);
  return attends ? 4.0 * keys * static_cast<double>(m.q_width()) : 0;
}

}  // namespace

double layer_forward_flops(const ModelSpec& m, const LayerId& l, int64_t tokens) {
  return (2 * layer_matmul_macs(m, l, static_cast<double>(m.padded_vocab())) +
          layer_attention_flops(m, l)) *
         static_cast<double>(tokens);
}

double segment_forward_flops(const ModelSpec& m, const Segment& s, int64_t tokens) {
  double flops = 0;
  for (const LayerId& l : s.layers)
    flops += layer_forward_flops(m, l, tokens);
  return flops;
}

double model_flops_per_token(const ModelSpec& m) {
  double f = 0;
  for (const LayerId& l : all_layers(m))
    f += 3 *
         (2 * layer_matmul_macs(m, l, static_cast<double>(m.vocab)) + layer_attention_flops(m, l));
  return f;
}

}  // namespace fsdpgen
