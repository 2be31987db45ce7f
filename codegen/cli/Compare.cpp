// Compare: the flags and their checks, reading the traces, and the reports'
// output.
#include "codegen/cli/Compare.h"

#include <charconv>
#include <cstdio>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "codegen/cli/Common.h"
#include "codegen/driver/Output.h"
#include "codegen/planner/Compare.h"
#include "runtime/files/file_io.h"

namespace fsdpgen {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  try {
    return file_read_whole(path, kJsonFileMaxBytes);
  } catch (const std::exception& e) {
    error(e.what());
    return std::nullopt;
  }
}

// --ranks A,B: two ranks, or why not.
std::string parse_rank_pair(const std::string& text, int& a, int& b) {
  const std::string why =
      fmt::format("--ranks {}: expected two ranks of the trace as A,B (e.g. --ranks 0,3)", text);
  const size_t comma = text.find(',');
  if (comma == std::string::npos) return why;
  auto rank = [](std::string_view t, int& out) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return !t.empty() && ec == std::errc() && end == t.data() + t.size() && out >= 0;
  };
  const std::string_view all(text);
  return rank(all.substr(0, comma), a) && rank(all.substr(comma + 1), b) ? "" : why;
}

// Two ranks of one measured trace (--ranks A,B), in compare's tables.
int run_compare_ranks(const std::string& trace, const std::string& ranks, int top) {
  int a = 0, b = 0;
  if (const std::string why = parse_rank_pair(ranks, a, b); !why.empty()) {
    error(why);
    return kExitUsage;
  }
  const auto m = read_text(trace);
  if (!m) return kExitSpecError;
  try {
    out(compare_ranks_report(read_step_trace(*m, trace), a, b, top));
    return 0;
  } catch (const CompareError& e) {
    error(e.what());
    return kExitSpecError;
  }
}

}  // namespace

// `measured` empty: `predicted` is the one trace of --ranks.
int run_compare(const std::string& predicted, const std::string& measured, int rank, int top,
                const std::string& merged, const std::string& ranks) {
  if (!ranks.empty() && !measured.empty()) {
    std::fputs(
        "fsdpgen: error: --ranks compares two ranks of one measured trace: give that trace "
        "alone, not two\n",
        stderr);
    return kExitUsage;
  }
  if (!ranks.empty()) return run_compare_ranks(predicted, ranks, top);
  if (measured.empty()) {
    std::fputs(
        "fsdpgen: error: compare needs a predicted and a measured trace, or one measured trace "
        "and --ranks A,B\n",
        stderr);
    return kExitUsage;
  }
  const auto p = read_text(predicted), m = read_text(measured);
  if (!p || !m) return kExitSpecError;
  if (const std::string overlap = file_output_overlap(merged, {predicted, measured});
      !merged.empty() && !overlap.empty()) {
    std::fputs(
        fmt::format("fsdpgen: error: {}: compare -o would overwrite a trace it reads\n", overlap)
            .c_str(),
        stderr);
    return kExitSpecError;
  }
  try {
    const StepTrace pt = read_step_trace(*p, predicted), mt = read_step_trace(*m, measured);
    out(compare_report(pt, mt, {rank, top}));
    if (!merged.empty() && !write_output(merged, merged_trace(pt, mt, rank))) return kExitSpecError;
    if (!merged.empty())
      out(
          fmt::format("\nboth steps, each stream's predicted track above its measured one: {} "
                      "(ui.perfetto.dev)\n",
                      merged));
    return 0;
  } catch (const CompareError& e) {
    error(e.what());
    return kExitSpecError;
  }
}

namespace {

struct CompareFlags {
  std::string predicted, measured, merged, ranks;
  int rank = 0, top = 20;
};

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto f = std::make_shared<CompareFlags>();
  CLI::App* compare = app.add_subcommand(
      "compare",
      "a predicted step (schedule --format trace) against a measured one (./train --trace), op "
      "by op; or two ranks of one measured step (--ranks A,B)");
  compare
      ->add_option("predicted", f->predicted,
                   "the predicted trace (with --ranks: the measured one)")
      ->required();
  compare->add_option("measured", f->measured, "the measured trace");
  CLI::Option* rank_option =
      compare->add_option("--rank", f->rank, "the measured rank compared op by op (default 0)")
          ->check(CLI::NonNegativeNumber);
  compare->add_option("--top", f->top, "ops listed, largest difference first (0: all)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* output_option =
      compare->add_option("-o,--output", f->merged,
                          "also write both steps as one Perfetto trace, each stream's predicted "
                          "track above its measured one");
  compare
      ->add_option("--ranks", f->ranks,
                   "A,B: rank B of a measured trace against its rank A, op kind by op kind and op "
                   "by op (a straggler against a typical rank)")
      ->excludes(rank_option)
      ->excludes(output_option);
  return {compare, [f] {
            return run_compare(f->predicted, f->measured, f->rank, f->top, f->merged, f->ranks);
          }};
}

}  // namespace fsdpgen
