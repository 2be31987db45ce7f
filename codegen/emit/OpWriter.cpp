// OpWriter: named pointers, the op's communicator and conversions, in the
// target's vocabulary.
#include "codegen/emit/OpWriter.h"

namespace fsdpgen::emit {

OpWriter::OpWriter(const EmitContext& c, ProgramNotes& n, const Op& o)
    : ctx(c), notes(n), op(o), host_(c.cuda && fsdpgen::runs_on_host(c.s, o)) {}

std::string OpWriter::let(Body& body, const std::string& name, const std::string& type,
                          At at) const {
  if (at.buffer < 0) return "nullptr";
  const Buffer& b = ctx.buf(at.buffer);
  body.decls += fmt::format("{}{}* {} = {}<{}>(c, {});  // {}{}\n", body.indent, type, name,
                            b.space == MemSpace::Device ? "dev" : "host", type,
                            ctx.offset(at.buffer) + at.bytes, b.name,
                            at.bytes ? fmt::format(" + {}", at.bytes) : "");
  body.names.insert(name);
  return name;
}

std::string OpWriter::comm(Body& b) const {
  b.decls +=
      fmt::format("{}{} comm = {}(c, stream_id::{}, comm_group::{});\n", b.indent,
                  on_gpu() ? "const gpu_comm&" : "MPI_Comm", on_gpu() ? "cuda_op_comm" : "op_comm",
                  to_string(op.stream), to_string(op.group));
  return "comm";
}

void OpWriter::convert(Body& b, int dst, const std::string& dst_name, const std::string& dst_t,
                       const std::string& src_name, const std::string& src_t, int64_t n,
                       bool accumulate) {
  if (on_gpu() && ctx.buf(dst).space == MemSpace::Host && dst_t == src_t && !accumulate)
    call(b, "cuda_copy({}, {}, {}, {});  // {} values, nothing to convert", dst_name, src_name,
         n * (dst_t == dtype_enum(DType::FP32) ? 4 : 2), gpu_exec(), n);
  else
    call(b, "tensor_convert({}, {}, {}, {}, {}, {}{});", dst_name, dst_t, src_name, src_t, n,
         accumulate, gtail());
}

}  // namespace fsdpgen::emit
