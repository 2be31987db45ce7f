// The fsdpgen command line: subcommands over the compiler's passes.
//   fsdpgen check spec.fsdp [--dump]
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dsl/Frontend.h"
#include "dsl/Layers.h"
#include "dsl/Print.h"

namespace fsdpgen {
namespace {

// Exit statuses: 0 success, 1 the spec has errors, 2 bad command line or unreadable input.
constexpr int kExitSpecError = 1;

int run_check(const std::string& path, bool dump) {
  FrontendResult r = load_spec_file(path);
  std::fputs(r.diagnostics.c_str(), stderr);
  if (!r.spec) return kExitSpecError;
  const Spec& s = *r.spec;
  if (dump) {
    std::fputs(fmt::format("# Resolved by fsdpgen from {}.\n", path).c_str(), stdout);
    std::fputs(print_spec(s).c_str(), stdout);
    return 0;
  }
  const ParallelSpec& p = s.parallel;
  std::string groups = is_hybrid(p.sharding) ? fmt::format(" ({} groups of {})", p.replicas(), p.shard_group) : "";
  std::fputs(fmt::format("{}: ok: model {} ({}, {} parameters, {} layers), {} wrap units, {} over {} rank{}{}\n", path,
                         s.model.name, to_string(s.model.family), model_params(s.model), s.model.layers,
                         s.units.units.size(), to_string(p.sharding), p.world, p.world == 1 ? "" : "s", groups)
                 .c_str(),
             stdout);
  return 0;
}

}  // namespace
}  // namespace fsdpgen

int main(int argc, char** argv) {
  CLI::App app{"fsdpgen: compiles a .fsdp spec into a specialized FSDP training binary"};
  app.require_subcommand(1);
  std::string spec_path;
  bool dump = false;
  CLI::App* check = app.add_subcommand("check", "parse and check a spec; with --dump print it fully resolved");
  check->add_option("spec", spec_path, "the .fsdp spec file")->required();
  check->add_flag("--dump", dump, "print the resolved spec (every default filled in) in the spec language");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\nRun 'fsdpgen --help' for usage.\n", e.what()).c_str(), stderr);
    return 2;
  }
  if (check->parsed()) return fsdpgen::run_check(spec_path, dump);
  return 2;
}
