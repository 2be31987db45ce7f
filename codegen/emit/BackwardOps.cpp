// BackwardOps: a segment's backward, its layers in reverse: the head and
// final norm, each block or run of its pieces (the custom layers between
// the family's calls), the embedding; the unit's gradients zeroed by the
// first backward that writes them.
#include "codegen/emit/CustomLayers.h"
#include "codegen/emit/LayerArgs.h"
#include "codegen/emit/OpBodies.h"
#include "dsl/Layers.h"

namespace fsdpgen::emit {

namespace {

void head_backward(OpWriter& w, Body& b, const Segment& seg, int params, int grads, int logits,
                   At slot) {
  const EmitContext& c = w.ctx;
  const std::string s = w.let_bytes(b, "slot", slot);
  const std::string dnorm =
      table_args(w, b, c.layout().final_norm, c.final_norm_params, grads, seg.unit, true);
  const std::string dhead_w =
      w.let(b, "dhead_w", "grad_t", grad(c, grads, head_unit(c, seg), c.head_weight()));
  const model::Tensor& norm_weight = c.layout().final_norm[0];  // backward reads the weight only
  const std::string norm_w =
      w.let(b, norm_weight.name, "param_t", param(c, params, seg.unit, c.final_norm_params[0]));
  const std::string head_w =
      w.let(b, "head_w", "param_t", param(c, params, head_unit(c, seg), c.head_weight()));
  const std::string lg = w.let(b, "logits", "param_t", {logits, 0});
  call(b, "auto saved = {}_final_norm_saved_at<param_t>({}, kDims);", c.fam(), s);
  call(b, "{}_head_backward<param_t, grad_t>({}, {}, {}, {}, {}, saved, scratch, kDims, {});",
       c.fam(), dnorm, dhead_w, norm_w, head_w, lg, w.ws());
}

void block_backward(OpWriter& w, Body& b, size_t k, size_t end, int params, int grads, At slot,
                    int input) {
  const EmitContext& c = w.ctx;
  const Segment& seg = c.segment(w.op);
  const BlockArgs a = block_args(w, b, k, end, {params, grads, slot, input, {}}, true);
  for (size_t x = a.calls.size(); x-- > 0;) {
    const PieceCall& pc = a.calls[x];
    if (pc.custom < 0) {
      call(b, "{}_block_backward<param_t, grad_t>(grads, params, saved, scratch, {}{}, {}{});",
           c.fam(), a.rope, a.dims, w.ws(), family_pieces_arg(c, seg, k, end, pc));
      continue;
    }
    custom_backward(w, b, seg.layers[k].block, pc.custom, params, grads, slot);
  }
}

void embed_backward(OpWriter& w, Body& b, int grads) {
  const EmitContext& c = w.ctx;
  const int u = c.segment(w.op).unit;
  const std::string dweights = table_args(w, b, c.layout().embed, c.embed_params, grads, u, true);
  const std::string tokens = w.let(b, "tokens", "int32_t", {w.op.operand(Role::Inputs), 0});
  call(b, "{}_embed_backward<param_t, grad_t>({}, {}, scratch, kDims{});", c.fam(), dweights,
       tokens, w.gtail());
}

}  // namespace

std::string backward_op(OpWriter& w) {
  const EmitContext& c = w.ctx;
  const Op& op = w.op;
  const Segment& seg = c.segment(op);
  const int params = op.operand(Role::Params);
  const int acts = op.operand(Role::Saved);
  const int saved = saved_of(w);
  const int grads = op.operand(Role::Grads);
  const std::vector<int64_t> slots = slot_offsets(c, seg);
  Body top;
  if (grads >= 0 && w.notes.zeroed.insert(grads).second) {
    const std::string g = w.let_bytes(top, "unit_grads", {grads, 0});
    call(top, "tensor_zero({}, {}{});  // the first write of {}", g, c.buf(grads).bytes, w.gtail(),
         c.buf(grads).name);
  }
  const std::string d = w.let_bytes(top, "act_grads", {op.operand(Role::Scratch), 0});
  call(top, "auto scratch = {}_backward_scratch_at<param_t>({}, kDims);", c.fam(), d);
  std::string out = top.text();
  const bool scope = scoped(seg);
  std::vector<size_t> starts;  // each layer's, a run of pieces once
  for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k))
    starts.push_back(k);
  for (size_t x = starts.size(); x-- > 0;) {
    const size_t r = starts[x];
    const LayerId& l = seg.layers[r];
    Body b = layer_body(scope);
    switch (l.kind) {
      case LayerId::Kind::Head:
        head_backward(w, b, seg, params, grads, op.operand(Role::Logits), {saved, slots[r - 1]});
        out += close(b, scope, "head and final_norm");
        break;
      case LayerId::Kind::FinalNorm:
        break;
      case LayerId::Kind::Block:
        block_backward(w, b, r, piece_run_end(seg, r), params, grads, {saved, slots[r]},
                       reads_group_input(c, seg, l) && saved != acts ? acts : -1);
        out += close(b, scope, layer_name(c.model, l));
        break;
      case LayerId::Kind::Embed:
        embed_backward(w, b, grads);
        out += close(b, scope, "embed");
        break;
    }
  }
  return out;
}

}  // namespace fsdpgen::emit
