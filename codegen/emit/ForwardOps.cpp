// ForwardOps: a segment's forward (and its recompute) layer by layer: the
// embedding, each block or run of its pieces (the family's calls and the
// custom layers between them), and the final norm, head and loss.
#include "codegen/emit/CustomLayers.h"
#include "codegen/emit/LayerArgs.h"
#include "codegen/emit/OpBodies.h"
#include "dsl/Layers.h"

namespace fsdpgen::emit {

namespace {

void embed_forward(OpWriter& w, Body& b, int params, At out) {
  const EmitContext& c = w.ctx;
  const int inputs = w.op.operand(Role::Inputs);
  const int u = c.segment(w.op).unit;
  const std::string tokens = w.let(b, "tokens", "int32_t", {inputs, 0});
  const std::string targets = w.let(b, "targets", "int32_t", {inputs, targets_offset_bytes(c.act)});
  const std::string weights = table_args(w, b, c.layout().embed, c.embed_params, params, u, false);
  const std::string dst = w.let(b, "out", "param_t", out);
  call(b, "step_fill_inputs(c, {}, {}, {}{});", w.op.micro_batch, tokens, targets, w.gtail());
  call(b, "{}_embed_forward<param_t>({}, {}, {}, kDims{});", c.fam(), dst, tokens, weights,
       w.gtail());
}

// Layers [k, end) of the op's segment: a block, or a run of its pieces.
// `input`: the buffer the block reads its input from when it is not in its slot (-1).
void block_forward(OpWriter& w, Body& b, size_t k, size_t end, int params, At slot, int input,
                   At out) {
  const EmitContext& c = w.ctx;
  const Segment& seg = c.segment(w.op);
  const BlockArgs a = block_args(w, b, k, end, {params, -1, slot, input, out}, false);
  for (const PieceCall& pc : a.calls) {
    if (pc.custom < 0) {
      // The family's last piece writes the block's output, or the input
      // row of a layer added after it.
      const bool last = pc.family_end == block_piece_count_family(c);
      const std::string family_out = !last                ? "nullptr"
                                     : c.added_custom < 0 ? a.out
                                                          : added_input(w, b, c.added_custom, slot);
      call(b, "{}_block_forward<param_t>({}, params, saved, {}{}, {}{});", c.fam(), family_out,
           a.rope, a.dims, w.ws(), family_pieces_arg(c, seg, k, end, pc));
      continue;
    }
    custom_forward(w, b, seg.layers[k].block, pc.custom, params, slot,
                   out.buffer >= 0 ? a.out : "");
  }
}

void head_forward(OpWriter& w, Body& b, int params, At slot) {
  const EmitContext& c = w.ctx;
  const Segment& seg = c.segment(w.op);
  const int logits = w.op.operand(Role::Logits);
  const std::string s = w.let_bytes(b, "slot", slot);
  const std::string lg = w.let(b, "logits", "param_t", {logits, 0});
  const std::string losses =
      w.let(b, "losses", "float", {logits, losses_offset_bytes(c.model, c.act)});
  const std::string targets =
      w.let(b, "targets", "int32_t", {w.op.operand(Role::Inputs), targets_offset_bytes(c.act)});
  const std::string norm =
      table_args(w, b, c.layout().final_norm, c.final_norm_params, params, seg.unit, false);
  const std::string head_w =
      w.let(b, "head_w", "param_t", param(c, params, head_unit(c, seg), c.head_weight()));
  call(b, "auto saved = {}_final_norm_saved_at<param_t>({}, kDims);", c.fam(), s);
  call(b, "{}_head_forward<param_t>({}, {}, {}, {}, {}, saved, kDims, {}, {});", c.fam(), lg,
       losses, targets, norm, head_w, w.on_gpu() ? "cuda_dloss_scale(c)" : "c.dloss_scale", w.ws());
  call(b, "step_add_losses(c, {}, {}{});", losses, c.N, w.gtail());
}

// Forward of a segment's layers into the saved region `saved` (acts, or
// scratch under recompute). `next` is where the last layer's output goes
// (no buffer to skip it: recompute rebuilds only what backward reads).
std::string forward_body(OpWriter& w, int params, int saved, int acts_in, At next) {
  const EmitContext& c = w.ctx;
  const Segment& seg = c.segment(w.op);
  const std::vector<int64_t> slots = slot_offsets(c, seg);
  const bool scope = scoped(seg);
  std::string out;
  for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k)) {
    const LayerId& l = seg.layers[k];
    if (!writes_code(l)) continue;
    const size_t end = piece_run_end(seg, k);
    const bool last = end == seg.layers.size();
    At dst = last ? next : At{saved, slots[end] + input_field(c, seg.layers[end])};
    if (l.kind == LayerId::Kind::Block && !writes_block_output(c.model, seg.layers[end - 1]))
      dst = {};
    Body b = layer_body(scope);
    switch (l.kind) {
      case LayerId::Kind::Embed:
        embed_forward(w, b, params, dst);
        out += close(b, scope, "embed");
        break;
      case LayerId::Kind::Block:
        block_forward(w, b, k, end, params, {saved, slots[k]},
                      reads_group_input(c, seg, l) && saved != acts_in ? acts_in : -1, dst);
        out += close(b, scope, layer_name(c.model, l));
        break;
      case LayerId::Kind::Head:
        head_forward(w, b, params, {saved, slots[k - 1]});
        out += close(b, scope, "final_norm, head and loss");
        break;
      case LayerId::Kind::FinalNorm:
        break;
    }
  }
  return out;
}

// Where the op's segment's output goes in forward: the next segment's input.
At next_input(const OpWriter& w) {
  if (w.op.segment + 1 >= static_cast<int>(w.ctx.s.units.segments.size())) return {};
  return segment_input(w.ctx, w.op.segment + 1, w.op.operand(Role::NextInput));
}

}  // namespace

std::string forward_op(OpWriter& w) {
  return forward_body(w, w.op.operand(Role::Params), saved_of(w), w.op.operand(Role::Saved),
                      next_input(w));
}

std::string recompute_op(OpWriter& w) {
  return forward_body(w, w.op.operand(Role::Params), saved_of(w), w.op.operand(Role::Saved), {});
}

}  // namespace fsdpgen::emit
