// Check: AST -> Spec, in order: the sections with their tables of keys
// (dsl/Fields), each followed by its overrides, its defaults and the rules
// between its keys (dsl/Rules), the model's custom layers (dsl/CustomLayers);
// then the wrap units (dsl/Units).
#include "dsl/Check.h"

#include <map>
#include <string>

#include <fmt/format.h>

#include "dsl/CustomLayers.h"
#include "dsl/Fields.h"
#include "dsl/Rules.h"
#include "dsl/Units.h"
#include "dsl/Values.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

// The first section of each kind; a second one is reported.
std::map<std::string, const ast::Section*> sections_of(const ast::File& file, Diagnostics& d) {
  std::map<std::string, const ast::Section*> first;
  for (const ast::Section& sec : file.sections) {
    auto [it, fresh] = first.emplace(sec.kind, &sec);
    if (fresh) continue;
    Diagnostic& e = d.error(sec.kind_span, fmt::format("duplicate '{}' section", sec.kind));
    Diagnostics::note(e, it->second->kind_span, "previous definition is here");
  }
  return first;
}

// True when the model's keys were all read and agree: its units can be resolved.
bool check_model(const ast::Section* model, const ast::Section* layers, CheckContext& ctx) {
  if (!model && !ctx.after_syntax_errors) {
    Diagnostic& e = ctx.diags.error({0, 0}, "missing 'model' section");
    Diagnostics::note(e,
                      "a spec starts with e.g. 'model tiny { vocab = 256  context = 128  width = "
                      "128  heads = 4  layers = 4 }'");
  }
  if (!model || !read_model(*model, ctx)) return false;
  fill_model_defaults(ctx);
  if (!check_rules(RuleSection::Model, ctx) || ctx.keys.rejected_under("model.")) return false;
  if (!layers) return true;
  const size_t errors = ctx.diags.error_count();
  resolve_custom_layers(*layers, ctx);
  return ctx.diags.error_count() == errors;
}

}  // namespace

std::optional<Spec> check(const ast::File& file, Diagnostics& diags, const SpecOverrides& overrides,
                          const std::string& spec_dir) {
  CheckContext ctx(diags);
  ctx.spec_dir = spec_dir;
  std::map<std::string, const ast::Section*> sections = sections_of(file, diags);
  auto section = [&](const char* kind) {
    auto it = sections.find(kind);
    return it == sections.end() ? nullptr : it->second;
  };
  bool model_ok = check_model(section("model"), section("layers"), ctx);
  if (const ast::Section* p = section("parallel")) read_parallel(*p, ctx);
  if (overrides.world) override_world(ctx, *overrides.world);
  fill_parallel_defaults(ctx);
  check_rules(RuleSection::Parallel, ctx);
  if (const ast::Section* t = section("train")) read_train(*t, ctx);
  if (overrides.micro_batch) override_micro_batch(ctx, *overrides.micro_batch);
  fill_train_defaults(ctx);
  check_rules(RuleSection::Train, ctx);
  if (model_ok) {
    resolve_units(section("units"), ctx);
    check_shardable(ctx);
  }
  if (diags.has_errors()) return std::nullopt;
  return ctx.spec;
}

}  // namespace fsdpgen
