// ParamTables: kTensors (each parameter tensor, where it lies in its unit's
// flat parameter) and kUnits (each unit's sizes and persistent buffers).
#include <fmt/format.h>

#include "codegen/emit/CppText.h"
#include "codegen/emit/CustomLayers.h"
#include "codegen/emit/Tables.h"

namespace fsdpgen::emit {

std::string tensor_table(const EmitContext& c) {
  std::string out =
      "// Tensors: Hugging Face name, unit, offset in the unit's flat parameter, shape.\n";
  out += "constexpr program_tensor kTensors[] = {\n";
  for (const FlatUnit& f : c.s.units.units)
    for (const FlatTensor& ft : f.tensors)
      out +=
          wrap_line(fmt::format("    {{{}, {}, {}, {}, {}{}}},", cpp_string(ft.name), f.index,
                                ft.offset_elems, ft.shape[0], ft.shape.size() > 1 ? ft.shape[1] : 0,
                                tensor_init_fields(c, ft)),
                    "     ") +
          "\n";
  return out + "};\n\n";
}

std::string unit_table(const EmitContext& c) {
  std::string out =
      "// Units: name, params, padded and shard elements, first tensor and tensor count;\n";
  out += "// buffers: param shard, master, optimizer state, grad shard; the grad shard's dtype.\n";
  out += "constexpr program_unit kUnits[] = {\n";
  size_t first = 0;  // the unit's first row of kTensors
  for (const FlatUnit& f : c.s.units.units) {
    auto persistent = [&](BufferKind k) {
      for (const Buffer& b : c.s.buffers)
        if (b.kind == k && b.unit == f.index && b.persistent) return b.id;
      return -1;
    };
    int grad_shard = -1;
    int64_t grad_bytes = 4;
    for (const Buffer& b : c.s.buffers)
      if (b.unit == f.index &&
          (b.kind == BufferKind::GradShard || (!c.comm && b.kind == BufferKind::UnshardedGrads))) {
        grad_bytes = b.bytes / f.shard_elems;
        if (b.persistent) grad_shard = b.id;
      }
    out += wrap_line(fmt::format("    {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}},",
                                 cpp_string(f.name), f.param_elems, f.padded_elems, f.shard_elems,
                                 first, f.tensors.size(), persistent(BufferKind::ParamShard),
                                 persistent(BufferKind::MasterWeights),
                                 persistent(BufferKind::OptimizerState), grad_shard,
                                 grad_bytes == 4 ? "dtype_id::fp32" : dtype_enum(c.half)),
                     "     ") +
           "\n";
    first += f.tensors.size();
  }
  return out + "};\n\n";
}

}  // namespace fsdpgen::emit
