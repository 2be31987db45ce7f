// CustomLayers: a custom layer's local, entry points and residual glue.
#include "codegen/emit/CustomLayers.h"

#include "codegen/emit/LayerArgs.h"

namespace fsdpgen::emit {

namespace {

// A custom layer's entry point for the target: forward, or forward_cuda.
std::string entry_point(const OpWriter& w, const std::string& name) {
  return w.on_gpu() ? name + "_cuda" : name;
}
// What it gets last (layers/fsdpgen_layer.h, layers/fsdpgen_layer_cuda.h).
std::string layer_context(OpWriter& w) {
  return w.on_gpu() ? fmt::format("fsdpgen::layer::Cuda{{{}}}", w.gpu_exec())
                    : fmt::format("fsdpgen::layer::Cpu{{{}}}", w.ws());
}

// With red zones (--check): the zone after each array bound at `base` of
// `buffer`, for the program's table, named `prefix` + the array's name.
void note_red_zones(OpWriter& w, const std::vector<CustomArraySpec>& arrays,
                    const std::vector<CustomGlue::Zone>& zones, int buffer, int64_t base,
                    const std::string& prefix) {
  for (size_t i = 0; i < zones.size(); ++i)
    w.notes.inner_red_zones.insert(
        {buffer, base + zones[i].begin, zones[i].bytes, prefix + arrays[i].name});
}

// The custom layer of `custom` as a local named after its module, its
// hyper-parameters, parameters (and with `grads` their gradients) and
// saved arrays set; with `scratch` (backward) its scratch arrays too.
std::string custom_layer_local(OpWriter& w, Body& b, int64_t block, int custom, int params,
                               int grads, At slot, int scratch) {
  const CustomGlue& g = w.ctx.custom[static_cast<size_t>(custom)];
  const CustomLayerSpec& c = *g.spec;
  const int unit = w.ctx.segment(w.op).unit;
  call(b, "{}<param_t, grad_t> {}{{}};  // {} (custom, {})", c.layer, g.var, c.module,
       header_name(c.header));
  for (const CustomLayerSpec::Hyper& h : c.hyper)
    call(b, "{}.hyper.{} = {};", g.var, h.name, h.value);
  const std::string prefix = w.ctx.block_prefix(block) + c.module + ".";
  const std::vector<TensorAt>& tensors = g.params[static_cast<size_t>(block)];
  for (size_t i = 0; i < c.params.size(); ++i) {
    const CustomTensorSpec& t = c.params[i];
    call(b, "{}.{}.value = {};", g.var, t.name,
         w.let(b, c.module + "_" + t.name, "param_t", param(w.ctx, params, unit, tensors[i])));
    if (grads >= 0)
      call(b, "{}.{}.grad = {};", g.var, t.name,
           w.let(b, "d" + c.module + "_" + t.name, "grad_t", grad(w.ctx, grads, unit, tensors[i])));
  }
  for (size_t i = 0; i < c.saved.size(); ++i) {
    const CustomArraySpec& a = c.saved[i];
    call(b, "{}.{}.data = {};", g.var, a.name,
         w.let(b, c.module + "_" + a.name, a.fp32 ? "float" : "param_t",
               {slot.buffer, slot.bytes + g.saved_rows[i]}));
  }
  note_red_zones(w, c.saved, g.saved_zones, slot.buffer, slot.bytes, prefix);
  if (scratch >= 0) {
    for (size_t i = 0; i < c.scratch.size(); ++i) {
      const CustomArraySpec& a = c.scratch[i];
      call(b, "{}.{}.data = {};", g.var, a.name,
           w.let(b, c.module + "_" + a.name, a.fp32 ? "float" : "param_t",
                 {scratch, g.scratch_rows[i]}));
    }
    note_red_zones(w, c.scratch, g.scratch_zones, scratch, 0, c.module + ".");
  }
  return g.var;
}

// The layer's input: an added layer's own row, else its module's saved row.
std::string layer_input(const OpWriter& w, Body& b, int custom, At slot) {
  const model::Module& m = *w.ctx.custom[static_cast<size_t>(custom)].module;
  return m.added() ? added_input(w, b, custom, slot) : "saved." + std::string(m.input);
}

}  // namespace

void custom_forward(OpWriter& w, Body& b, int64_t block, int custom, int params, At slot,
                    const std::string& dst) {
  const std::string layer = custom_layer_local(w, b, block, custom, params, -1, slot, -1);
  const model::Module& m = *w.ctx.custom[static_cast<size_t>(custom)].module;
  const std::string x = layer_input(w, b, custom, slot);
  const bool kept = m.output || !dst.empty();
  const std::string y =
      m.output ? "saved." + std::string(m.output)
      : kept   ? dst
               : w.let(b, "unused_out", "param_t", {w.op.operand(Role::Scratch), w.ctx.custom_out});
  call(b, "{}.{}({}, {}, kDims.N(), {});", layer, entry_point(w, "forward"), x, y,
       layer_context(w));
  if (!kept) return;
  if (m.residual)
    call(b, "residual_forward({}, {}, saved.{}, kDims.N() * kDims.C{});", y, y, m.residual,
         w.gtail());
  else if (m.added())
    call(b, "residual_forward({}, {}, {}, kDims.N() * kDims.C{});", y, y, x, w.gtail());
}

void custom_backward(OpWriter& w, Body& b, int64_t block, int custom, int params, int grads,
                     At slot) {
  const int scratch = w.op.operand(Role::Scratch);
  const std::string layer = custom_layer_local(w, b, block, custom, params, grads, slot, scratch);
  const CustomGlue& g = w.ctx.custom[static_cast<size_t>(custom)];
  const model::Module& m = *g.module;
  const std::string x = layer_input(w, b, custom, slot);
  const std::string dy = m.residual || m.added() ? "scratch.dres" : "scratch.dtmp";
  const std::string dx =
      m.dinput_in_dtmp ? "scratch.dtmp"
                       : w.let(b, g.spec->module + "_dx", "param_t", {scratch, w.ctx.custom_out});
  call(b, "{}.{}({}, {}, {}, kDims.N(), {});", layer, entry_point(w, "backward"), x, dy, dx,
       layer_context(w));
  if (!m.dinput_in_dtmp)
    call(b, "residual_forward(scratch.dres, scratch.dres, {}, kDims.N() * kDims.C{});", dx,
         w.gtail());
}

std::string added_input(const OpWriter& w, Body& b, int custom, At slot) {
  const CustomGlue& g = w.ctx.custom[static_cast<size_t>(custom)];
  const std::string name = g.spec->module + "_x";
  if (b.names.count(name)) return name;
  return w.let(b, name, "param_t", {slot.buffer, slot.bytes + g.input_row});
}

std::string tensor_init_fields(const EmitContext& ctx, const FlatTensor& tensor) {
  const auto it = ctx.custom_tensors.find(&tensor);
  if (it == ctx.custom_tensors.end()) return "";
  const CustomTensorSpec& t = *it->second;
  switch (t.init) {
    case CustomTensorSpec::Init::Normal:
      return fmt::format(", tensor_init::normal, {}f", cpp_double(t.std));
    case CustomTensorSpec::Init::Ones:
      return ", tensor_init::ones";
    case CustomTensorSpec::Init::Zeros:
      return ", tensor_init::zeros";
  }
  return "";
}

std::string header_name(const std::string& header) {
  const size_t slash = header.rfind('/');
  return slash == std::string::npos ? header : header.substr(slash + 1);
}

}  // namespace fsdpgen::emit
