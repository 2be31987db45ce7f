// The fsdpgen command line: subcommands over the compiler's passes.
//   fsdpgen check spec.fsdp [--dump | --hf DIR]
//   fsdpgen schedule spec.fsdp [--world N] [--micro-batch B] [--format text|json|trace] [-o FILE]
//   fsdpgen plan spec.fsdp [--world N] [--micro-batch B] [--gpu KIND] [--hardware PROFILE]
//   fsdpgen emit spec.fsdp -o DIR [--target cuda|cpu] [--world N] [--micro-batch B] [--gpu KIND]
//   fsdpgen spec.fsdp -o train [--target cuda|cpu] [--sources DIR] ...   (= fsdpgen build)
//   fsdpgen merge CHECKPOINT -o model.safetensors|DIR [--dtype fp32|bf16|fp16]
//                [--max-shard-size 5GB] [--spec spec.fsdp]
//   fsdpgen calibrate [SPEC...] -o profile.json [--target cpu|cuda] [--ranks N] [--world N]
//                     [--micro-batch B] [--quick]
//   fsdpgen compare PREDICTED.json MEASURED.json [--rank R] [--top N] [-o merged.json]
//   fsdpgen compare MEASURED.json --ranks A,B [--top N]
//   fsdpgen check-layer HEADER LAYER --hyper NAME=VALUE... [--dtype bf16|fp16] [--tokens N]
//   fsdpgen import-hf DIR|config.json [-o spec.fsdp]
//   fsdpgen prepare INPUT... -o DIR --tokenizer TOKENIZER ...   (tools/prepare.py's flags)
//   fsdpgen prepare-eval hellaswag_val.jsonl --tokenizer TOKENIZER -o hellaswag_val.bin
//   fsdpgen metrics RUN.jsonl --tensorboard DIR [--wandb-offline DIR] [--follow [--pid PID]]
//                   (tools/metrics_export.py's flags)
//   fsdpgen train-tokenizer INPUT... -o DIR --vocab N ...  (tools/train_tokenizer.py's flags)
//   fsdpgen sample MODEL [--spec spec.fsdp] [--prompt TEXT | --prompt-ids IDS] [--tokens N]
//                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--samples K]
//                  [--tokenizer tokenizer.json]
//   fsdpgen tune spec.fsdp [--world N | --worlds 8,16,32] [--gpu KIND | --hardware PROFILE]
//                [-o tuned.fsdp] [--top K] [--keep KNOB...] [--allow-batch-change]
//                [--allow-numerics] [--min-gain PCT] [--write-candidates DIR]
// Each subcommand but merge and import-hf runs the pipeline (codegen/driver/Pipeline.h) up to its
// last pass; --dump-after PASS prints a pass's IR and --time-passes times them.
// Each subcommand's file declares its flags and runs it (add_*_command, codegen/cli/Command.h);
// this file lists the subcommands in order, takes `fsdpgen spec.fsdp` for build, reports an
// unknown subcommand or a bad command line (exit 2) and runs the one parsed.
#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "codegen/cli/Build.h"
#include "codegen/cli/Calibrate.h"
#include "codegen/cli/CheckLayer.h"
#include "codegen/cli/Command.h"
#include "codegen/cli/Common.h"
#include "codegen/cli/Compare.h"
#include "codegen/cli/HfSpec.h"
#include "codegen/cli/Merge.h"
#include "codegen/cli/Plan.h"
#include "codegen/cli/PythonTool.h"
#include "codegen/cli/Sample.h"
#include "codegen/cli/Tune.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

// Whether a first word that is no subcommand is a spec to build: an existing
// file, or a path or .fsdp name (a missing spec is then reported as such).
bool looks_like_spec_path(const std::string& word) {
  std::error_code ec;
  return std::filesystem::is_regular_file(word, ec) || word.find('/') != std::string::npos ||
         word.ends_with(".fsdp");
}

std::string unknown_subcommand_error(const std::string& word,
                                     const std::vector<std::string_view>& commands) {
  std::string msg = fmt::format("fsdpgen: error: unknown subcommand '{}'", word);
  if (std::string close = closest_match(word, commands); !close.empty())
    msg += fmt::format("; did you mean '{}'?", close);
  return msg + fmt::format(
                   " (no file of that name either); subcommands are {}, or a spec file to build "
                   "(fsdpgen spec.fsdp -o train)\nRun 'fsdpgen --help' for usage.\n",
                   quoted_choices(commands));
}

// Every subcommand added to `app` with its flags, in the order `fsdpgen
// --help` lists them.
std::vector<Command> add_subcommands(CLI::App& app, const std::string& command_line) {
  std::vector<Command> commands;
  commands.push_back(add_check_command(app));
  commands.push_back(add_schedule_command(app));
  commands.push_back(add_plan_command(app));
  commands.push_back(add_emit_command(app));
  commands.push_back(add_build_command(app, command_line));
  commands.push_back(add_merge_command(app));
  commands.push_back(add_calibrate_command(app));
  commands.push_back(add_check_layer_command(app));
  commands.push_back(add_compare_command(app));
  commands.push_back(add_import_hf_command(app));
  for (Command& tool : add_python_tool_commands(app))
    commands.push_back(std::move(tool));
  commands.push_back(add_sample_command(app));
  commands.push_back(add_tune_command(app));
  return commands;
}

}  // namespace
}  // namespace fsdpgen

// The command line and its subcommand; main below catches what escapes.
static int run_fsdpgen(int argc, char** argv) {
  CLI::App app{"fsdpgen: compiles a .fsdp spec into a specialized FSDP training binary", "fsdpgen"};
  app.require_subcommand(1);

  std::string command_line = "fsdpgen";  // as typed, for build's job script
  for (int i = 1; i < argc; ++i)
    command_line += " " + std::string(argv[i]);
  const std::vector<fsdpgen::Command> subcommands = fsdpgen::add_subcommands(app, command_line);

  // `fsdpgen spec.fsdp -o train` is `fsdpgen build spec.fsdp -o train`.
  std::vector<std::string> args(argv + 1, argv + argc);
  // Every subcommand's name, in the order `fsdpgen --help` lists them.
  std::vector<std::string> names;
  for (const fsdpgen::Command& c : subcommands)
    names.push_back(c.app->get_name());
  const std::vector<std::string_view> commands(names.begin(), names.end());
  if (!args.empty() && !args[0].empty() && args[0][0] != '-' &&
      std::find(commands.begin(), commands.end(), args[0]) == commands.end()) {
    if (!fsdpgen::looks_like_spec_path(args[0])) {
      std::fputs(fsdpgen::unknown_subcommand_error(args[0], commands).c_str(), stderr);
      return fsdpgen::kExitUsage;
    }
    args.insert(args.begin(), "build");
  }
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fputs(
        fmt::format("fsdpgen: error: {}\nRun 'fsdpgen --help' for usage.\n", e.what()).c_str(),
        stderr);
    return fsdpgen::kExitUsage;
  }
  for (const fsdpgen::Command& c : subcommands)
    if (c.app->parsed()) return c.run();
  return fsdpgen::kExitUsage;
}

// What a reader throws past the subcommands' own handlers is an internal
// error, said in one line: never std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run_fsdpgen(argc, argv);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: internal error: {}\n", e.what()).c_str(), stderr);
  } catch (...) {
    std::fputs("fsdpgen: internal error: an exception of unknown type\n", stderr);
  }
  return fsdpgen::kExitInternal;
}
