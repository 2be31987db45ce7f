// EmitContext: the program's figures and its custom layers' glue, resolved
// once from the plan's layout tables.
#include "codegen/emit/EmitContext.h"

#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dsl/Layers.h"

namespace fsdpgen::emit {

namespace {

// The built-in figures the schedule was planned for (the planner checked the name).
Hardware hardware_of(const std::string& name) {
  std::optional<Hardware> h = find_hardware(name);
  if (!h) throw std::logic_error(unknown_hardware_error(name));
  return *h;
}

// Where row `name` of a layout table starts in its slot (a logic error if absent).
int64_t row_offset(const EmitContext& c, const model::Table<model::Field>& t,
                   const std::string& name) {
  return model::offset_bytes(t, model::index_of(t, name.c_str()), layout_dims(c.model, c.act), c.N,
                             c.pbytes);
}

// Each array's row in `t`, and with red zones (--check) the zone after it.
void resolve_arrays(const EmitContext& c, const model::Table<model::Field>& t,
                    const std::string& module, const std::vector<CustomArraySpec>& arrays,
                    std::vector<int64_t>& rows, std::vector<CustomGlue::Zone>& zones) {
  for (const CustomArraySpec& a : arrays) {
    rows.push_back(row_offset(c, t, module + "." + a.name));
    if (!c.model.custom_red_zones) continue;
    const int64_t elem = a.fp32 ? 4 : c.pbytes;
    const int64_t begin = rows.back() + c.N * a.per_token * elem;
    const int64_t end =
        row_offset(c, t, custom_red_zone_row(module, a.name)) + c.N * kCustomRedZonePerToken * elem;
    zones.push_back({begin, end - begin});
  }
}

// Every parameter tensor of the plan's units by its Hugging Face name.
using TensorIndex = std::map<std::string_view, TensorAt>;
TensorIndex index_tensors(const Units& units) {
  TensorIndex index;
  for (const FlatUnit& u : units.units)
    for (const FlatTensor& t : u.tensors)
      index[t.name] = {t.name, u.index, &t};
  return index;
}
TensorAt find(const TensorIndex& index, const std::string& name) {
  const auto it = index.find(name);
  return it == index.end() ? TensorAt{name} : it->second;
}
std::vector<TensorAt> find_rows(const TensorIndex& index, model::Table<model::Tensor> table,
                                const std::string& prefix) {
  std::vector<TensorAt> rows;
  for (const model::Tensor& t : table)
    rows.push_back(find(index, prefix + t.hf_name));
  return rows;
}

// The family's tables' tensors (EmitContext::block_params and the others).
void resolve_params(EmitContext& c, const TensorIndex& index) {
  c.embed_params = find_rows(index, c.layout().embed, "");
  c.final_norm_params = find_rows(index, c.layout().final_norm, "");
  c.head_params = find_rows(index, c.layout().head, "");
  for (int64_t b = 0; b < c.model.layers; ++b)
    c.block_params.push_back(find_rows(index, c.layout().block, c.block_prefix(b)));
}

// The saved rows a custom model sets one by one, the scratch's custom_out,
// and each custom layer's glue.
void resolve_custom_layers(EmitContext& ctx, const TensorIndex& index) {
  const LayoutTable saved = block_saved_layout(ctx.model);
  const LayoutTable scratch = backward_scratch_layout(ctx.model);
  const model::Table<model::Field> saved_t = saved.table(), scratch_t = scratch.table();
  const model::Dims dims = layout_dims(ctx.model, ctx.act);
  for (const model::Field& f : saved_t) {
    const std::string name = f.name;
    if (name.find('.') != std::string::npos || !model::present(f, dims)) continue;
    ctx.saved_rows.push_back({name, row_offset(ctx, saved_t, name), f.elem == model::Elem::Fp32});
  }
  ctx.custom_out = row_offset(ctx, scratch_t, "custom_out");
  for (const CustomLayerSpec& c : ctx.model.custom) {
    CustomGlue g;
    g.spec = &c;
    g.module = replaceable_module(ctx.model, c.module);
    g.var = "layer_" + c.module;
    for (int64_t b = 0; b < ctx.model.layers; ++b) {
      std::vector<TensorAt>& params = g.params.emplace_back();
      for (const CustomTensorSpec& t : c.params) {
        params.push_back(find(index, ctx.block_prefix(b) + c.module + "." + t.name));
        if (params.back().tensor) ctx.custom_tensors[params.back().tensor] = &t;
      }
    }
    resolve_arrays(ctx, saved_t, c.module, c.saved, g.saved_rows, g.saved_zones);
    resolve_arrays(ctx, scratch_t, c.module, c.scratch, g.scratch_rows, g.scratch_zones);
    if (g.module->added()) {
      g.input_row = row_offset(ctx, saved_t, c.module + ".x");
      if (ctx.added_custom < 0) ctx.added_custom = static_cast<int>(ctx.custom.size());
    }
    ctx.custom.push_back(std::move(g));
  }
}

}  // namespace

EmitContext::EmitContext(const std::string& spec_path, const Schedule& schedule,
                         const MemoryPlan& memory, const EmitTarget& t)
    : path(spec_path),
      s(schedule),
      m(memory),
      spec(schedule.units.spec),
      model(spec.model),
      target(t),
      hardware(hardware_of(t.hardware)),
      cuda(t.kind == EmitTarget::Kind::Cuda) {
  const ParallelSpec& p = spec.parallel;
  comm = p.shard_group > 1 || p.replicas() > 1;
  pbytes = dtype_bytes(p.precision.param);
  reduce = unsharded_grad_dtype(p);
  rbytes = dtype_bytes(reduce);
  // The spec's 16-bit type (param and reduce do not mix bf16 and fp16).
  half = p.precision.param != DType::FP32 ? p.precision.param : p.precision.reduce;
  act = {schedule.micro_batch * model.context, pbytes, schedule.options.flash_attention};
  N = act.tokens;
  const TensorIndex index = index_tensors(schedule.units);
  resolve_params(*this, index);
  if (custom_model()) resolve_custom_layers(*this, index);
}

int64_t EmitContext::offset_elems(const TensorAt& t, int u) const {
  if (t.unit != u) throw std::logic_error(fmt::format("emit: unit {} has no tensor {}", u, t.name));
  return t.tensor->offset_elems;
}

std::string EmitContext::block_prefix(int64_t block) const {
  return fmt::format(fmt::runtime(layout().block_prefix), block);
}

}  // namespace fsdpgen::emit
