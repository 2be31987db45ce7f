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
#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "codegen/cli/Build.h"
#include "codegen/cli/Calibrate.h"
#include "codegen/cli/CheckLayer.h"
#include "codegen/cli/Common.h"
#include "codegen/cli/Compare.h"
#include "codegen/cli/HfSpec.h"
#include "codegen/cli/Merge.h"
#include "codegen/cli/Plan.h"
#include "codegen/cli/PythonTool.h"
#include "codegen/cli/Sample.h"
#include "codegen/cli/Tune.h"
#include "dsl/Spec.h"
#include "runtime/files/checkpoint_merge.h"
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

}  // namespace
}  // namespace fsdpgen

// The command line and its subcommand; main below catches what escapes.
static int run_fsdpgen(int argc, char** argv) {
  CLI::App app{"fsdpgen: compiles a .fsdp spec into a specialized FSDP training binary", "fsdpgen"};
  app.require_subcommand(1);

  std::string command_line = "fsdpgen";
  for (int i = 1; i < argc; ++i)
    command_line += " " + std::string(argv[i]);
  std::vector<fsdpgen::Command> subcommands = {
      fsdpgen::add_check_command(app), fsdpgen::add_schedule_command(app),
      fsdpgen::add_plan_command(app), fsdpgen::add_emit_command(app),
      fsdpgen::add_build_command(app, command_line)};

  std::string merge_in, merge_out, merge_dtype = "fp32", merge_max_shard, merge_spec;
  CLI::App* merge = app.add_subcommand(
      "merge",
      "write a checkpoint's weights with Hugging Face names: one safetensors file (-o "
      "x.safetensors), or a model directory transformers loads (any other -o)");
  merge
      ->add_option("checkpoint", merge_in,
                   "a step_N checkpoint directory, or a directory of them (its newest)")
      ->required();
  merge
      ->add_option("-o,--output", merge_out,
                   "a .safetensors file to write, or else a model directory (new, empty, or a "
                   "model directory it replaces)")
      ->required();
  merge
      ->add_option("--max-shard-size", merge_max_shard,
                   "a model directory's weight files hold at most this much each (default 5GB; "
                   "e.g. 500MB, 2GiB, bytes), as transformers' save_pretrained")
      ->check(CLI::Validator(
          [](std::string& size) {
            return shard_size_bytes(size)
                       ? std::string()
                       : fmt::format(
                             "'{}' is not a size: bytes, or a number with kB, MB, GB, "
                             "KiB, MiB or GiB (e.g. 5GB)",
                             size);
          },
          "SIZE"));
  merge->add_option("--spec", merge_spec,
                    "the spec whose config.json (and token set) the model directory gets "
                    "(default: the one the checkpoint names, found from its run's directory or "
                    "from here)");
  merge
      ->add_option("--dtype", merge_dtype,
                   "fp32 (default), bf16 or fp16; also spelled f32, f16, float32, bfloat16, "
                   "float16")
      ->check(CLI::Validator(
          [](std::string& word) {
            return fsdpgen::dtype_named(word)
                       ? std::string()
                       : fmt::format(
                             "unknown dtype '{}': fp32, bf16 or fp16 (or f32, f16, "
                             "float32, bfloat16, float16)",
                             word);
          },
          "DTYPE"));

  fsdpgen::CalibrateOptions calibrate_opts;
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "measure this machine (its layer passes, optimizer, collectives and copies as the runtime "
      "runs them) into a hardware profile for plan and schedule --hardware");
  calibrate->add_option("specs", calibrate_opts.specs,
                        "specs whose steps to measure (default: a standard sweep of shapes)");
  calibrate->add_option("-o,--output", calibrate_opts.output, "the profile (JSON) to write");
  calibrate
      ->add_option("--target", calibrate_opts.target,
                   "cpu or cuda (default: cuda when a GPU is visible here, else cpu)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  calibrate->add_option("--gpu", calibrate_opts.gpu,
                        "cuda: the built-in hardware whose figures the profile refines "
                        "(default: h100-sxm)");
  calibrate
      ->add_option("--ranks", calibrate_opts.ranks,
                   "ranks on this node (default: as many as the specs put on a node, up to "
                   "its cores or GPUs)")
      ->check(CLI::Range(1, 1024));
  calibrate->add_flag("--quick", calibrate_opts.quick, "fewer runs per measurement (seconds)");
  calibrate->add_option("--world", calibrate_opts.world,
                        "number of ranks (replaces each spec's parallel.world)");
  calibrate->add_option(
      "--micro-batch", calibrate_opts.micro_batch,
      "sequences per rank per micro-batch (replaces each spec's train.micro_batch)");
  calibrate->add_option("--request", calibrate_opts.request,
                        "write what to measure to this file and stop (run the printed command "
                        "under srun on the cluster)");
  calibrate
      ->add_option("--nodes", calibrate_opts.nodes,
                   "with --request: the nodes the printed command runs on (--ranks on each); "
                   "collectives whose groups span nodes are then measured across them")
      ->check(CLI::Range(1, 1024));

  fsdpgen::CheckLayerOptions layer_opts;
  CLI::App* check_layer = app.add_subcommand(
      "check-layer",
      "check a custom layer before it trains: bounds and writes of every member, gradients "
      "against finite differences, determinism, 16-bit against fp32");
  check_layer->add_option("header", layer_opts.header, "the layer header")->required();
  check_layer->add_option("layer", layer_opts.layer, "the layer's class template")->required();
  check_layer
      ->add_option("--hyper", layer_opts.hyper,
                   "each hyper-parameter as name=value (e.g. --hyper d_model=8 d_ff=20)")
      ->expected(1, -1);
  check_layer->add_option("--width", layer_opts.width,
                          "the input's and output's width (default: the value of d_model)");
  check_layer->add_option("--tokens", layer_opts.tokens,
                          "rows of the input (default: 2 x context where the layer has a "
                          "hyper-parameter so named, else 6)");
  check_layer
      ->add_option("--dtype", layer_opts.dtype,
                   "bf16 or fp16: also run the layer in it against the reference (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  check_layer->add_option("--keep", layer_opts.keep,
                          "keep the generated check program in this directory");
  check_layer->footer(
      "Exit status: 0 every check passed, 1 a check failed or the layer does not compile, 2 bad "
      "command line.");

  std::string compare_predicted, compare_measured, compare_merged, compare_ranks;
  int compare_rank = 0, compare_top = 20;
  CLI::App* compare = app.add_subcommand(
      "compare",
      "a predicted step (schedule --format trace) against a measured one (./train --trace), op "
      "by op; or two ranks of one measured step (--ranks A,B)");
  compare
      ->add_option("predicted", compare_predicted,
                   "the predicted trace (with --ranks: the measured one)")
      ->required();
  compare->add_option("measured", compare_measured, "the measured trace");
  CLI::Option* compare_rank_option =
      compare->add_option("--rank", compare_rank, "the measured rank compared op by op (default 0)")
          ->check(CLI::NonNegativeNumber);
  compare->add_option("--top", compare_top, "ops listed, largest difference first (0: all)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* compare_output =
      compare->add_option("-o,--output", compare_merged,
                          "also write both steps as one Perfetto trace, each stream's predicted "
                          "track above its measured one");
  compare
      ->add_option("--ranks", compare_ranks,
                   "A,B: rank B of a measured trace against its rank A, op kind by op kind and op "
                   "by op (a straggler against a typical rank)")
      ->excludes(compare_rank_option)
      ->excludes(compare_output);

  std::string import_source, import_output;
  CLI::App* import_hf = app.add_subcommand(
      "import-hf",
      "write the spec of a Hugging Face model (GPT2LMHeadModel or LlamaForCausalLM) from its "
      "config.json, with default units, parallel and train sections to edit");
  import_hf
      ->add_option("source", import_source, "a Hugging Face model directory, or its config.json")
      ->required();
  import_hf->add_option("-o,--output", import_output, "the spec to write (default: stdout)");
  import_hf->footer(
      "Exit status: 0 written, 1 the config cannot be read or has keys no spec represents (all "
      "named) or the spec cannot be written, 2 bad command line.");

  CLI::App* prepare = app.add_subcommand(
      "prepare",
      "text, JSON lines, Parquet or a saved Hugging Face dataset into llm.c token files through "
      "the model's tokenizer, sharded, with a validation split and manifest.json (fsdpgen "
      "prepare --help: tools/prepare.py's flags)");
  prepare->prefix_command();  // every word after `prepare` is the tool's, --help included
  prepare->set_help_flag();
  CLI::App* prepare_eval = app.add_subcommand(
      "prepare-eval",
      "HellaSwag's JSON lines (ctx, endings, label) into llm.c's multiple-choice evaluation file "
      "through the model's tokenizer, for the binary's --eval (fsdpgen prepare-eval --help: "
      "tools/prepare_eval.py's flags)");
  prepare_eval->prefix_command();
  prepare_eval->set_help_flag();
  CLI::App* metrics = app.add_subcommand(
      "metrics",
      "a run's --metrics file as TensorBoard event files or a W&B offline run, once or live "
      "beside the run (fsdpgen metrics --help: tools/metrics_export.py's flags)");
  metrics->prefix_command();
  metrics->set_help_flag();
  CLI::App* train_tokenizer = app.add_subcommand(
      "train-tokenizer",
      "a byte-level BPE tokenizer (GPT-2's or Llama 3's special tokens) trained on your text with "
      "Hugging Face tokenizers, for prepare and a spec's vocab (fsdpgen train-tokenizer --help: "
      "tools/train_tokenizer.py's flags)");
  train_tokenizer->prefix_command();
  train_tokenizer->set_help_flag();

  fsdpgen::SampleOptions sample_opts;
  CLI::App* sample = app.add_subcommand(
      "sample",
      "text generated on the CPU with a KV cache from a checkpoint, a .safetensors file with "
      "--spec, or a Hugging Face model directory (docs/sample.md)");
  sample
      ->add_option("model", sample_opts.model,
                   "a checkpoint (step_N or a directory of them), a .safetensors file (with "
                   "--spec) or a Hugging Face model directory (config.json)")
      ->required();
  sample->add_option("--spec", sample_opts.spec,
                     "the spec the weights were trained from (default: a checkpoint's own)");
  sample->add_option("--prompt", sample_opts.prompt,
                     "text to continue, encoded by the tokenizer through Hugging Face tokenizers "
                     "(bytes for a 256-token model)");
  sample->add_option("--prompt-ids", sample_opts.prompt_ids,
                     "token ids to continue, e.g. 50256,464 (default: the document-start token)");
  sample->add_option("--tokens", sample_opts.tokens, "tokens to generate (default 64)");
  sample->add_option("--temperature", sample_opts.temperature,
                     "logits divided by it before drawing; 0: greedy (default 1)");
  sample->add_option("--top-k", sample_opts.top_k,
                     "draw among the k most likely tokens (default 0: all)");
  sample->add_option("--top-p", sample_opts.top_p,
                     "draw among the fewest most likely tokens whose probability reaches p "
                     "(default 1: all)");
  sample->add_option("--seed", sample_opts.seed,
                     "the generator's seed (std::mt19937_64); sample k uses seed + k "
                     "(default 1337)");
  sample->add_option("--samples", sample_opts.samples, "samples to print (default 1)");
  sample->add_option("--tokenizer", sample_opts.tokenizer,
                     "the tokenizer.json (or its directory) that decodes the ids (default: the "
                     "model directory's, or the one beside the run's token set's manifest.json)");

  fsdpgen::TuneCliOptions tune_opts;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "the fastest configuration that fits: every sharding, units, recompute, offload, "
      "micro-batch x accumulation (same global batch), reduce and prefetch choice that keeps the "
      "model's math planned and timed, ranked");
  tune->add_option("spec", tune_opts.spec, "the .fsdp spec file")->required();
  tune->add_option("--world", tune_opts.world, "number of ranks (replaces parallel.world)");
  tune->add_option("--worlds", tune_opts.worlds,
                   "sweep these worlds instead (e.g. 8,16,32), the global batch kept");
  tune->add_option("--gpu", tune_opts.gpu,
                   "built-in hardware to tune for (default: h100-sxm where a GPU is visible, "
                   "else cpu)");
  tune->add_option("--hardware", tune_opts.hardware,
                   "a hardware profile `fsdpgen calibrate` measured (.json), or a built-in name");
  tune->add_option("-o,--output", tune_opts.output,
                   "write the winner: the spec with only the changed keys rewritten");
  tune->add_option("--top", tune_opts.top, "rows in the ranked table (default 10)");
  tune->add_option("--min-gain", tune_opts.min_gain_pct,
                   "-o writes the fastest only when it is predicted at least this many percent "
                   "faster per token than the spec as written, else the spec unchanged (default 5)")
      ->check(CLI::Range(0.0, 1000.0));
  tune->add_option("--write-candidates", tune_opts.write_candidates,
                   "write every planned candidate that fits as a spec into this directory "
                   "(candidate_NNN.fsdp, fastest first; candidates.tsv lists their predicted "
                   "steps): what tests/bench/tune/run.sh measures");
  tune->add_option("--keep", tune_opts.keep,
                   "knobs kept as written: sharding, units, recompute, offload, micro_batch, "
                   "reduce, prefetch, precision")
      ->expected(1, -1);
  tune->add_flag("--allow-batch-change", tune_opts.allow_batch_change,
                 "also try other global batches (each such row says so)");
  tune->add_flag("--allow-numerics", tune_opts.allow_numerics,
                 "also try changes of the numerics: the reduce dtype, and micro-batch gradients "
                 "summed in a 16-bit reduce dtype (each such row says [numerics: ...]; --keep "
                 "precision or reduce pins one)");
  tune->add_flag("--time-passes", tune_opts.time_passes, "print where the search's time went");
  tune->footer(
      "Exit status: 0 something fits (ranked; -o written), 4 nothing fits (the smallest world "
      "that would is named), 1 the spec has errors or -o cannot be written, 2 bad command line.");

  // `fsdpgen spec.fsdp -o train` is `fsdpgen build spec.fsdp -o train`.
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string_view> commands = {
      "check",     "schedule",        "plan",        "emit",        "build", "merge",
      "calibrate", "compare",         "check-layer", "import-hf",   "tune",  "prepare",
      "metrics",   "train-tokenizer", "sample",      "prepare-eval"};
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
  if (merge->parsed())
    return fsdpgen::run_merge(merge_in, merge_out, merge_dtype, merge_max_shard, merge_spec);
  if (calibrate->parsed()) return fsdpgen::run_calibrate(calibrate_opts, fsdpgen::gpu_visible());
  if (check_layer->parsed()) return fsdpgen::run_check_layer(layer_opts);
  if (import_hf->parsed()) return fsdpgen::run_import_hf(import_source, import_output);
  if (prepare->parsed())
    return fsdpgen::run_python_tool("prepare", "prepare.py", prepare->remaining());
  if (prepare_eval->parsed())
    return fsdpgen::run_python_tool("prepare-eval", "prepare_eval.py", prepare_eval->remaining());
  if (metrics->parsed())
    return fsdpgen::run_python_tool("metrics", "metrics_export.py", metrics->remaining());
  if (train_tokenizer->parsed())
    return fsdpgen::run_python_tool("train-tokenizer", "train_tokenizer.py",
                                    train_tokenizer->remaining());
  if (tune->parsed()) return fsdpgen::run_tune(tune_opts, fsdpgen::gpu_visible());
  if (sample->parsed()) return fsdpgen::run_sample(sample_opts);
  if (compare->parsed())
    return fsdpgen::run_compare(compare_predicted, compare_measured, compare_rank, compare_top,
                                compare_merged, compare_ranks);
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
