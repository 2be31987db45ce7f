// CommOps: the ops that move or reduce whole buffers: the collectives
// (all-gather, reduce-scatter, all-reduce), the copies between host and
// device, the gradient norm's partial sums and the optimizer step.
#include "codegen/emit/OpBodies.h"

namespace fsdpgen::emit {

namespace {

std::string reduce_dtype(const EmitContext& c) {
  return dtype_enum(c.reduce);
}
std::string dtype_of(const EmitContext& c, int buffer, int64_t elems) {
  return c.buf(buffer).bytes / elems == 4 ? "dtype_id::fp32" : dtype_enum(c.half);
}
// A later micro-batch adds to the gradient shard; the first (or the only reduction) sets it.
bool accumulates(const OpWriter& w) {
  return w.op.micro_batch > 0 && w.ctx.spec.parallel.accumulate.reduce == AccumulateReduce::Every;
}

}  // namespace

std::string all_gather_op(OpWriter& w) {
  Body b;
  const std::string c = w.comm(b);
  const std::string shard = w.let_bytes(b, "shard", {w.op.operand(Role::Src), 0});
  const std::string params = w.let_bytes(b, "params", {w.op.operand(Role::Dst), 0});
  call(b, "comm_all_gather({}, {}, {}, {}{});", c, shard, params,
       w.ctx.unit(w.op.unit).shard_elems * w.ctx.pbytes, w.gtail());
  return b.text();
}

std::string reduce_scatter_op(OpWriter& w) {
  const EmitContext& ctx = w.ctx;
  const int64_t n = ctx.unit(w.op.unit).shard_elems;
  const int staging = w.op.operand(Role::Staging);
  const int shard = w.op.operand(Role::GradShard);
  Body b;
  const std::string c = w.comm(b);
  const std::string grads = w.let_bytes(b, "grads", {w.op.operand(Role::Grads), 0});
  const std::string stage = w.let_bytes(b, "staging", {staging, 0});
  const std::string dst = w.let_bytes(b, "shard", {shard, 0});
  call(b, "comm_reduce_scatter({}, {}, {}, {}, {}{});", c, grads, staging >= 0 ? stage : dst, n,
       reduce_dtype(ctx), w.gtail());
  if (staging >= 0 && shard >= 0)
    w.convert(b, shard, dst, dtype_of(ctx, shard, n), stage, reduce_dtype(ctx), n, accumulates(w));
  return b.text();
}

std::string all_reduce_op(OpWriter& w) {
  const EmitContext& ctx = w.ctx;
  const Op& op = w.op;
  Body b;
  const std::string c = w.comm(b);
  if (op.is_loss_reduce()) {  // the step's loss, for the guard
    call(b, "step_reduce_loss(c, {}{});", c, w.gtail());
    return b.text();
  }
  if (op.unit < 0) {  // the gradient norm's partial sums
    b.decls += fmt::format("  float* partial = {};\n", w.norm_partial());
    call(b, "comm_all_reduce({}, partial, partial, 1, dtype_id::fp32{});", c, w.gtail());
    return b.text();
  }
  const FlatUnit& f = ctx.unit(op.unit);
  const int grads = op.operand(Role::Grads);
  const int shard = op.operand(Role::GradShard);
  const std::string r = reduce_dtype(ctx);
  if (grads < 0) {
    // Hybrid: the accumulated shard across replicas, in the reduce dtype.
    const std::string s = w.let_bytes(b, "shard", {shard, 0});
    const std::string t = dtype_of(ctx, shard, f.shard_elems);
    const int64_t n = f.shard_elems;
    if (t == r) {
      call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, s, s, n, t, w.gtail());
      return b.text();
    }
    call(b, "tensor_narrow_in_place({}, {}, {}{});  // fp32 accumulator -> {} for the reduction", s,
         n, r, w.gtail(), to_string(ctx.reduce));
    call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, s, s, n, r, w.gtail());
    call(b, "tensor_widen_in_place({}, {}, {}{});", s, n, r, w.gtail());
    return b.text();
  }
  // no_shard: the whole unit's gradient across replicas.
  const int64_t n = f.padded_elems;
  const std::string t = dtype_of(ctx, shard, n);
  const std::string g = w.let_bytes(b, "grads", {grads, 0});
  const std::string s = w.let_bytes(b, "shard", {shard, 0});
  // (On a GPU, into a shard in host memory (offload): in place, then a copy.)
  if (t == r && ctx.spec.parallel.accumulate.micro_batches == 1 &&
      !(w.on_gpu() && ctx.buf(shard).space == MemSpace::Host)) {
    call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, g, s, n, t, w.gtail());
    return b.text();
  }
  call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, g, g, n, r, w.gtail());
  w.convert(b, shard, s, t, g, r, n, accumulates(w));
  return b.text();
}

// Bytes from Src to Dst on the op's stream: a host shard to the device
// (offload), or activations between device and host.
std::string copy_h2d_op(OpWriter& w) {
  Body b;
  const std::string src = w.let_bytes(b, "src", {w.op.operand(Role::Src), 0});
  const std::string dst = w.let_bytes(b, "dst", {w.op.operand(Role::Dst), 0});
  if (w.on_gpu())
    call(b, "cuda_copy({}, {}, {}, {});", dst, src, w.op.payload_bytes, w.gpu_exec());
  else
    call(b, "std::memcpy({}, {}, {});", dst, src, w.op.payload_bytes);
  return b.text();
}

// Offload: a reduce-scatter's output (accumulated over micro-batches), or
// at world 1 the step's unsharded fp32 gradients, into the host shard; or
// (an op of a segment) a block's saved input into host memory, byte for byte.
std::string copy_d2h_op(OpWriter& w) {
  if (w.op.segment >= 0) return copy_h2d_op(w);
  const int64_t n = w.ctx.unit(w.op.unit).shard_elems;
  const int shard = w.op.operand(Role::Dst);
  Body b;
  const std::string src = w.let_bytes(b, "src", {w.op.operand(Role::Src), 0});
  const std::string dst = w.let_bytes(b, "shard", {shard, 0});
  // A micro-batch's reduce-scatter output accumulates; the step's gradients
  // (one copy, no micro-batch) set the shard.
  w.convert(b, shard, dst, dtype_of(w.ctx, shard, n), src, reduce_dtype(w.ctx), n, accumulates(w));
  return b.text();
}

std::string grad_norm_op(OpWriter& w) {
  Body b;
  for (const OpOperand& o : w.op.operands) {
    const Buffer& buf = w.ctx.buf(o.buffer);
    const int64_t elems = w.ctx.unit(buf.unit).shard_elems;
    const std::string g = w.let_bytes(b, fmt::format("grads_u{}", buf.unit), {o.buffer, 0});
    call(b, "step_add_grad_norm(c, {}, {}, {}{});", g, dtype_of(w.ctx, o.buffer, elems), elems,
         w.gtail());
  }
  return b.text();
}

std::string optimizer_op(OpWriter& w) {
  Body b;
  const std::string shard = w.let_bytes(b, "shard", {w.op.operand(Role::Params), 0});
  const std::string master = w.let(b, "master", "float", {w.op.operand(Role::Master), 0});
  const std::string state = w.let(b, "state", "float", {w.op.operand(Role::OptimizerState), 0});
  const std::string grads = w.let_bytes(b, "grads", {w.op.operand(Role::GradShard), 0});
  if (const int update = w.op.operand(Role::MuonUpdate); update >= 0) {  // optimizer = muon(...)
    const std::string u = w.let(b, "update", "float", {update, 0});
    call(b, "step_optimizer(c, {}, {}, {}, {}, {}, {}{});", w.op.unit, shard, master, state, grads,
         u, w.gtail());
    return b.text();
  }
  call(b, "step_optimizer(c, {}, {}, {}, {}, {}{});", w.op.unit, shard, master, state, grads,
       w.gtail());
  return b.text();
}

}  // namespace fsdpgen::emit
