// EmitPass: emit_program as a pass, with its notes and its failures.
#include "codegen/driver/EmitPass.h"

#include <glob.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "codegen/driver/Output.h"
#include "codegen/emit/Emit.h"
#include "codegen/emit/Template.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Report.h"

namespace fsdpgen {
namespace {

// A file, or a glob pattern matching at least one file.
bool data_path_exists(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  const bool found = rc == 0 && g.gl_pathc > 0;
  globfree(&g);
  std::error_code ec;
  return found && (pattern.find_first_of("*?[") != std::string::npos ||
                   std::filesystem::is_regular_file(pattern, ec));
}

// Before emitting: notes on what the program will meet when it runs.
void note_before_emit(const std::string& spec_path, const PipelineOptions& o, const Spec& spec,
                      const Plan& p) {
  const Hardware& hw = *o.target;
  if (o.emit.kind == EmitTarget::Kind::Cuda && p.memory->device_arena_bytes > usable_bytes(hw))
    print_stderr(
        fmt::format("fsdpgen: warning: the plan needs {} per GPU but a {} has {} usable; "
                    "`fsdpgen plan {} --gpu {}` shows changes that fit\n",
                    gib_text(p.memory->device_arena_bytes), hw.name, gib_text(usable_bytes(hw)),
                    spec_path, o.emit.hardware));
  auto note_missing = [](const DataSpec& d, const char* key, const char* flag) {
    for (const std::string& file : d.paths)
      if (!data_path_exists(file))
        print_stderr(
            fmt::format("fsdpgen: note: the spec's {} file {} {} (a relative path is found from "
                        "the spec's directory); the binary reads it when it starts (or {})\n",
                        key, file,
                        file.find_first_of("*?[") == std::string::npos ? "does not exist yet"
                                                                       : "matches no file yet",
                        flag));
  };
  note_missing(spec.train.data, "data", "--data FILES");
  if (spec.train.val) note_missing(*spec.train.val, "val", "--val FILES");
}

}  // namespace

Failure emit_pass(const std::string& spec_path, const PipelineOptions& o, const Spec& spec,
                  const Plan& p, std::string& source) {
  note_before_emit(spec_path, o, spec, p);
  try {
    source = emit_program(spec_path, *p.schedule, *p.memory, o.emit);
    return Failure::None;
  } catch (const std::logic_error& e) {  // the emitter's own consistency checks
    print_stderr(fmt::format("fsdpgen: internal error: {}\n", e.what()));
  } catch (const TemplateError& e) {
    print_stderr(fmt::format("fsdpgen: internal error: {}\n", e.what()));
  }
  return Failure::Internal;
}

}  // namespace fsdpgen
