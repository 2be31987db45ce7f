// LayerArgs: a layer's parameters, slots and pieces as its calls take them.
#include "codegen/emit/LayerArgs.h"

#include <map>
#include <stdexcept>

#include "dsl/Layers.h"

namespace fsdpgen::emit {

namespace {

// Element offset of a block's first tensor; checks the block's tensors lie
// in the unit where the family runtime's params_at finds them (runtime/model/gpt2.h,
// runtime/model/llama.h).
int64_t block_offset(const EmitContext& c, int unit, int64_t block) {
  const model::Table<model::Tensor> layout = c.layout().block;
  const model::Dims dims = layout_dims(c.model, c.act);
  const std::vector<TensorAt>& rows = c.block_params[static_cast<size_t>(block)];
  bool as_laid_out = true;
  for (size_t i = 0; as_laid_out && i < rows.size(); ++i)
    as_laid_out =
        rows[i].unit == unit && rows[i].tensor->offset_elems - rows[0].tensor->offset_elems ==
                                    model::offset_elems(layout, i, dims);
  if (!as_laid_out)
    throw std::logic_error(
        fmt::format("emit: block {} tensors are not laid out as the {} layout table lays them out",
                    block, c.fam()));
  return rows.front().tensor->offset_elems;
}

bool recomputes(const EmitContext& c, const Segment& seg) {
  return c.spec.parallel.recompute == Recompute::Block && seg.unit != 0;
}

// llama: the rotary tables a block's forward and backward read ("" for gpt2).
std::string rope_arg(const OpWriter& w, Body& b, const std::string& dims) {
  const int tables = w.op.operand(Role::RopeTables);
  if (tables < 0) return "";
  call(b, "const llama_rope rope = llama_rope_at({}, {});",
       w.let(b, "rope_tables", "float", {tables, 0}), dims);
  return "rope, ";
}

// Layers [k, end) of a segment (a whole block, or a run of its pieces) as
// calls in forward order.
std::vector<PieceCall> piece_calls(const EmitContext& c, const Segment& seg, size_t k, size_t end) {
  const std::vector<BlockPiece> pieces = model_block_pieces(c.model);
  const LayerId& l = seg.layers[k];
  const int first = l.whole() ? 0 : l.piece;
  const int last = l.whole() ? static_cast<int>(pieces.size()) : seg.layers[end - 1].piece + 1;
  std::vector<PieceCall> calls;
  for (int i = first; i < last; ++i) {
    const BlockPiece& p = pieces[static_cast<size_t>(i)];
    if (p.custom < 0 && !calls.empty() && calls.back().custom < 0 &&
        calls.back().family_end == p.family_first)
      calls.back().family_end = p.family_end;
    else
      calls.push_back({p.family_first, p.family_end, p.custom});
  }
  return calls;
}

// A whole block's first tensor in `buffer`, declared (the carving's base);
// "" for pieces, or where custom layers make the block's tensors other
// than its family's layout (they are then set one by one).
std::string block_base(const OpWriter& w, Body& b, const Segment& seg, size_t k, int buffer,
                       bool grads) {
  const LayerId& l = seg.layers[k];
  if (!l.whole() || w.ctx.custom_model()) return "";
  return w.let(
      b, grads ? "dweights" : "weights", grads ? "grad_t" : "param_t",
      {buffer, block_offset(w.ctx, seg.unit, l.block) * (grads ? w.ctx.rbytes : w.ctx.pbytes)});
}

// A block's tensors in `buffer` (params, or grads when `grads`) as the
// family's struct named `var`: carved from `base` for a whole block of its
// family's layout, else the tensors of the family pieces in `calls` set
// one by one (the others null).
void block_tensors(const OpWriter& w, Body& b, const Segment& seg, size_t k,
                   const std::vector<PieceCall>& calls, int buffer, bool grads,
                   const std::string& var, const std::string& base) {
  const EmitContext& c = w.ctx;
  const LayerId& l = seg.layers[k];
  const std::string type = grads ? "grad_t" : "param_t";
  const int64_t elem = grads ? c.rbytes : c.pbytes;
  const std::string what = grads ? "grads" : "params";
  if (!base.empty()) {
    call(b, "auto {} = {}_block_{}_at<{}>({}, kDims);", var, c.fam(), what, type, base);
    return;
  }
  call(b, "{}_block_{}<{}> {}{{}};", c.fam(), what, type, var);
  const std::vector<TensorAt>& rows = c.block_params[static_cast<size_t>(l.block)];
  for (const PieceCall& pc : calls) {
    if (pc.custom >= 0) continue;
    for (int f = pc.family_first; f < pc.family_end; ++f) {
      const model::Piece& piece = c.layout().pieces[static_cast<size_t>(f)];
      for (int t = piece.first_tensor; t < piece.first_tensor + piece.tensors; ++t) {
        const model::Tensor& row = c.layout().block[static_cast<size_t>(t)];
        const int64_t at = c.offset_elems(rows[static_cast<size_t>(t)], seg.unit) * elem;
        call(b, "{}.{} = {};", var, row.name,
             w.let(b, fmt::format("{}{}", grads ? "d" : "", row.name), type, {buffer, at}));
      }
    }
  }
}

// The family's saved struct `saved` over the slot: carved by the family's
// runtime (its own layout), or with custom layers set row by row
// (EmitContext::saved_rows). `s`: the slot's declared name ("" with custom layers).
void block_saved(const OpWriter& w, Body& b, const std::string& s, At slot) {
  const EmitContext& c = w.ctx;
  if (!c.custom_model()) {
    call(b, "auto saved = {}_block_saved_at<param_t>({}, kDims);", c.fam(), s);
    return;
  }
  call(b, "{}_block_saved<param_t> saved{{}};", c.fam());
  for (const SavedRow& r : c.saved_rows)
    call(b, "saved.{} = {};", r.name,
         w.let(b, "saved_" + r.name, r.fp32 ? "float" : "param_t",
               {slot.buffer, slot.bytes + r.bytes}));
}

}  // namespace

At param(const EmitContext& c, int params_buf, int unit, const TensorAt& t) {
  return {params_buf, c.offset_elems(t, unit) * c.pbytes};
}
At grad(const EmitContext& c, int grads_buf, int unit, const TensorAt& t) {
  return {grads_buf, c.offset_elems(t, unit) * c.rbytes};
}

int head_unit(const EmitContext& c, const Segment& seg) {
  return c.model.tie_embeddings ? 0 : seg.unit;
}
int saved_of(const OpWriter& w) {
  return recomputes(w.ctx, w.ctx.segment(w.op)) ? w.op.operand(Role::RecomputeScratch)
                                                : w.op.operand(Role::Saved);
}

std::string table_args(const OpWriter& w, Body& b, model::Table<model::Tensor> table,
                       const std::vector<TensorAt>& at, int buffer, int unit, bool grads) {
  std::vector<std::string> names;
  for (size_t i = 0; i < table.count; ++i)
    names.push_back(grads ? w.let(b, fmt::format("d{}", table[i].name), "grad_t",
                                  grad(w.ctx, buffer, unit, at[i]))
                          : w.let(b, table[i].name, "param_t", param(w.ctx, buffer, unit, at[i])));
  return fmt::format("{}", fmt::join(names, ", "));
}

std::vector<int64_t> slot_offsets(const EmitContext& c, const Segment& seg) {
  int64_t at = 0;
  std::map<int64_t, int64_t> block_slot;  // split block -> its slot
  for (int i : group_segments(c.s.units, seg.group)) {
    const Segment& other = c.segment(i);
    std::vector<int64_t> off;
    for (const LayerId& l : other.layers) {
      if (l.kind == LayerId::Kind::Block && l.piece == 0) block_slot[l.block] = at;
      off.push_back(l.kind == LayerId::Kind::Block && l.piece > 0 ? block_slot.at(l.block) : at);
      at += layer_saved_bytes(c.model, l, c.act);
    }
    off.push_back(at);
    if (&other == &seg) return off;
  }
  throw std::logic_error("emit: a segment outside its group");
}

bool reads_group_input(const EmitContext& c, const Segment& seg, const LayerId& l) {
  const LayerId& first = c.segment(seg.group).layers.front();  // the group's first layer
  return l.kind == LayerId::Kind::Block && first.kind == LayerId::Kind::Block &&
         l.block == first.block;
}

size_t piece_run_end(const Segment& seg, size_t k) {
  const LayerId& l = seg.layers[k];
  size_t end = k + 1;
  if (l.kind != LayerId::Kind::Block || l.whole()) return end;
  while (end < seg.layers.size() && seg.layers[end].kind == LayerId::Kind::Block &&
         seg.layers[end].block == l.block && !seg.layers[end].whole())
    ++end;
  return end;
}

int64_t input_field(const EmitContext& c, const LayerId& l) {
  if (l.kind == LayerId::Kind::Head) return 0;
  return saved_field_offset_bytes(c.model, l, c.act, "input");
}

At segment_input(const EmitContext& c, int seg_index, int acts) {
  const Segment& seg = c.segment(seg_index);
  if (acts < 0) return {};  // it continues this segment's block: nothing to hand over
  if (recomputes(c, seg)) return {acts, 0};
  return {acts, input_field(c, seg.layers.front())};
}

bool writes_code(const LayerId& l) {
  return l.kind != LayerId::Kind::FinalNorm;
}
bool scoped(const Segment& seg) {
  int calls = 0;
  for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k))
    calls += writes_code(seg.layers[k]);
  return calls > 1;
}
Body layer_body(bool scoped) {
  Body b;
  b.indent = scoped ? "    " : "  ";
  return b;
}
std::string close(const Body& b, bool scoped, const std::string& what) {
  return scoped ? fmt::format("  {{  // {}\n{}  }}\n", what, b.text()) : b.text();
}

std::string family_pieces_arg(const EmitContext& c, const Segment& seg, size_t k, size_t end,
                              const PieceCall& pc) {
  if (c.custom_model())
    return fmt::format(", block_pieces{{{}, {}}}", pc.family_first, pc.family_end);
  const LayerId& l = seg.layers[k];
  if (l.whole()) return "";
  return fmt::format(", block_pieces{{{}, {}}}", l.piece, seg.layers[end - 1].piece + 1);
}

int block_piece_count_family(const EmitContext& c) {
  return static_cast<int>(c.layout().pieces.count);
}

BlockArgs block_args(const OpWriter& w, Body& b, size_t k, size_t end, const BlockBuffers& at,
                     bool backward) {
  const EmitContext& c = w.ctx;
  const Segment& seg = c.segment(w.op);
  BlockArgs a;
  a.calls = piece_calls(c, seg, k, end);
  const std::string s = c.custom_model() ? "" : w.let_bytes(b, "slot", at.slot);
  const std::string in = w.let(b, "input", "param_t", {at.input, 0});
  const std::string weights = block_base(w, b, seg, k, at.params, false);
  const std::string dweights = backward ? block_base(w, b, seg, k, at.grads, true) : "";
  a.out = w.let(b, "out", "param_t", at.out);
  block_saved(w, b, s, at.slot);
  if (at.input >= 0) call(b, "saved.input = {};", in);
  block_tensors(w, b, seg, k, a.calls, at.params, false, "params", weights);
  if (backward) block_tensors(w, b, seg, k, a.calls, at.grads, true, "grads", dweights);
  a.dims = c.block_dims(seg.layers[k].block);
  a.rope = rope_arg(w, b, a.dims);
  return a;
}

}  // namespace fsdpgen::emit
