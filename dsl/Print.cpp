// Print: Spec -> canonical spec-language text.
#include "dsl/Print.h"

#include <fmt/format.h>

#include "dsl/KeyTable.h"
#include "dsl/Layers.h"
#include "dsl/Literals.h"
#include "dsl/Units.h"

namespace fsdpgen {

namespace {

// [embed, block 0..3, block 4.ln_1, block 4.attn.c_attn, final_norm]
std::string layer_list(const ModelSpec& m, const std::vector<LayerId>& layers) {
  std::vector<std::string> parts;
  for (const LayerRun& r : layer_runs(layers))
    if (r.first.kind != LayerId::Kind::Block || r.first.block == r.last_block)
      parts.push_back(layer_name(m, r.first));
    else
      parts.push_back(fmt::format("block {}..{}", r.first.block, r.last_block));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// "a.h" for one path, ["a.h", "b.h"] for several.
std::string path_or_list(const std::vector<std::string>& paths) {
  std::vector<std::string> q;
  for (const std::string& p : paths)
    q.push_back(quote(p));
  return q.size() == 1 ? q[0] : fmt::format("[{}]", fmt::join(q, ", "));
}

void print_layers(const ModelSpec& m, std::string& out) {
  if (m.custom.empty()) return;
  out += fmt::format("layers {{\n  import = {}\n", path_or_list(m.layer_headers));
  if (!m.layer_cuda_sources.empty())
    out += fmt::format("  cuda = {}\n", path_or_list(m.layer_cuda_sources));
  for (const CustomLayerSpec& c : m.custom) {
    std::vector<std::string> args;
    for (const CustomLayerSpec::Hyper& h : c.hyper)
      args.push_back(
          fmt::format("{} = {}", h.name, h.from.empty() ? std::to_string(h.value) : h.from));
    out += fmt::format("  {} = {}({})\n", c.module, c.layer, fmt::join(args, ", "));
  }
  out += "}\n";
}

// `header {`, the table's shown keys, `}`.
template <class S>
void print_section(std::string_view header, const KeyTable<S>& table, const S& s,
                   std::string& out) {
  out += fmt::format("{} {{\n", header);
  for (const std::string& entry : print_keys(table, s))
    out += fmt::format("  {}\n", entry);
  out += "}\n";
}

void print_units(const Spec& s, std::string& out) {
  const UnitsSpec& u = s.units;
  out += "units {\n";
  for (const UnitSpec& x : u.explicit_units)
    if (!x.layers.empty())
      out += fmt::format("  unit {} {}\n", x.name, layer_list(s.model, x.layers));
  switch (u.policy) {
    case UnitPolicy::EachBlock:
      out += "  each block\n";
      break;
    case UnitPolicy::EachLinear:
      out += "  each linear\n";
      break;
    case UnitPolicy::Group:
      out += fmt::format("  group {} blocks\n", u.group);
      break;
    case UnitPolicy::MinParams:
      out += fmt::format("  min_params {}\n", u.min_params);
      break;
    case UnitPolicy::Explicit:
      break;
  }
  out += fmt::format("  # resolved: {} units (unit: layers, parameters)\n", u.units.size());
  for (size_t i = 0; i < u.units.size(); ++i) {
    int64_t n = 0;
    for (const LayerId& l : u.units[i].layers)
      n += layer_params(s.model, l);
    out += fmt::format("  #   {} {}: {}, {}\n", i, u.units[i].name,
                       layer_list(s.model, u.units[i].layers), n);
  }
  out += "}\n";
}

}  // namespace

std::string print_spec(const Spec& spec) {
  std::string out;
  print_section(fmt::format("model {}", spec.model.name), model_keys(), spec.model, out);
  print_layers(spec.model, out);
  print_units(spec, out);
  print_section("parallel", parallel_keys(), spec.parallel, out);
  print_section("train", train_keys(), spec.train, out);
  return out;
}

}  // namespace fsdpgen
