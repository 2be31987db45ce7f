// fsdpgen-calibrate: measures every entry of a request (a hardware profile
// whose times are zero, written by `fsdpgen calibrate`) on this machine
// through the runtime's own functions, and writes the measured profile.
//   mpirun -n N --bind-to none fsdpgen-calibrate REQUEST -o PROFILE
#include <mpi.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "runtime/calibrate/device.h"
#include "runtime/calibrate/ranks.h"
#include "runtime/calibrate/sweep.h"
#include "runtime/calibrate/target.h"
#include "runtime/files/file_io.h"
#include "runtime/launch.h"
#include "runtime/profile/profile.h"

#ifndef FSDPGEN_GIT_REVISION
#define FSDPGEN_GIT_REVISION "unknown"
#endif

namespace {

namespace profile = fsdpgen::profile;

struct flags {
  std::string request;
  std::string output;
  measure_options measure;
};

// Nothing when parsed; otherwise the exit status (help printed, or a bad
// flag reported by rank 0).
std::optional<int> parse_flags(flags& f, int argc, char** argv, int rank) {
  CLI::App app{
      "Measures each entry of REQUEST (a hardware profile whose seconds are 0, written by "
      "`fsdpgen calibrate`) on this machine and writes the measured profile. Run it under "
      "mpirun (or srun) with the ranks the request's compute sections and collectives need.",
      "fsdpgen-calibrate"};
  app.add_option("request", f.request, "The request (JSON)")->required();
  app.add_option("-o,--output", f.output, "Where to write the measured profile")->required();
  app.add_option("--min-runs", f.measure.min_runs,
                 "Timed runs per entry and round, at least (default 3)");
  app.add_option("--min-seconds", f.measure.min_seconds,
                 "Timed seconds per entry and round, at least (default 0.05; an entry stops at " +
                     std::to_string(kMaxRuns) + " runs a round)");
  app.add_option("--rounds", f.measure.rounds,
                 "Passes over every entry; an entry's time is the mean of its rounds' "
                 "(default 5)");
  try {
    app.parse(argc, argv);
    if (f.measure.min_runs < 1)
      throw CLI::ValidationError("--min-runs",
                                 fmt::format("must be at least 1, not {}", f.measure.min_runs));
    if (f.measure.rounds < 1)
      throw CLI::ValidationError("--rounds",
                                 fmt::format("must be at least 1, not {}", f.measure.rounds));
    if (!(f.measure.min_seconds >= 0) || !std::isfinite(f.measure.min_seconds))
      throw CLI::ValidationError("--min-seconds", fmt::format("must be a number of seconds >= 0, "
                                                              "not {}",
                                                              f.measure.min_seconds));
  } catch (const CLI::CallForHelp& e) {
    return rank == 0 ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (rank == 0)
      std::fprintf(stderr, "fsdpgen-calibrate: error: %s\nRun with --help for more information.\n",
                   e.what());
    return 2;
  }
  return std::nullopt;
}

// The request; throws calibrate_error on every rank.
profile::Profile load_request(const flags& f) {
  std::string error;
  profile::Profile p;
  try {
    if (!std::filesystem::exists(f.request))
      throw profile::ProfileError(fmt::format(
          "{}: no such request (`fsdpgen calibrate` writes one and runs this binary on it)",
          f.request));
    p = profile::load(f.request, false);
    const std::filesystem::path dir = std::filesystem::absolute(f.output).parent_path();
    if (const std::string overlap = file_output_overlap(f.output, {f.request}); !overlap.empty())
      error = overlap + ": the profile would overwrite the request it is measured from";
    else if (!std::filesystem::is_directory(dir))
      error = fmt::format("{}: cannot write the profile there: no directory {}", f.output,
                          dir.string());
  } catch (const profile::ProfileError& e) {
    error = e.what();
  }
  if (const std::string first = ranks_first_error(error); !first.empty())
    throw calibrate_error(first);
  return p;
}

// The runtime of the request's device.kind; throws calibrate_error on every
// rank when it cannot start on any.
std::unique_ptr<calibrate_target> target_for(const profile::Profile& request, const flags& f) {
  if (request.device.kind == "cpu") return cpu_target();
#ifdef FSDPGEN_CALIBRATE_CUDA
  std::string error;
  std::unique_ptr<calibrate_target> t;
  try {
    t = cuda_target();
  } catch (const std::exception& e) {
    error = fmt::format("{}: device.kind 'cuda': {}", f.request, e.what());
  }
  if (const std::string first = ranks_first_error(error); !first.empty())
    throw calibrate_error(first);
  return t;
#else
  throw calibrate_error(fmt::format(
      "{}: device.kind: 'cuda', but this fsdpgen-calibrate was built without the CUDA runtime "
      "(configure fsdpgen where nvcc and NCCL are found)",
      f.request));
#endif
}

// Rank 0 writes the profile; a failure is thrown on every rank.
void write_profile(profile::Profile& p, const calibrate_target& t, const flags& f,
                   const rank_layout& l) {
  std::string error;
  if (l.rank == 0) {
    p.device = t.describe(p.device.base);
    p.written_by = std::string("fsdpgen ") + FSDPGEN_GIT_REVISION;
    p.created = device_utc_now();
    try {
      profile::save(p, f.output);
    } catch (const profile::ProfileError& e) {
      error = e.what();
    }
  }
  if (const std::string first = ranks_first_error(error); !first.empty())
    throw calibrate_error(first);
}

int calibrate(const flags& f) {
  const rank_layout l = ranks_discover();
  const auto start = std::chrono::steady_clock::now();
  try {
    profile::Profile p = load_request(f);
    const std::unique_ptr<calibrate_target> t = target_for(p, f);
    sweep_check(p, l, *t, f.request);
    sweep_run(p, l, *t, f.request, f.measure);
    write_profile(p, *t, f, l);
  } catch (const calibrate_error& e) {
    if (l.rank == 0) std::fprintf(stderr, "fsdpgen-calibrate: error: %s\n", e.what());
    return 1;
  }
  if (l.rank == 0)
    fmt::print("calibrated on {} rank{} in {:.1f} s; wrote {}\n", l.world, l.world == 1 ? "" : "s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               f.output);
  return 0;
}

// Everything between MPI's start and its end; the exit status.
int run(int argc, char** argv, int provided) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0)
      std::fprintf(stderr,
                   "fsdpgen-calibrate: error: this MPI does not provide MPI_THREAD_MULTIPLE (got "
                   "level %d), which the runtime's comm layer needs\n",
                   provided);
    return 2;
  }
  flags f;
  if (const std::optional<int> status = parse_flags(f, argc, argv, rank)) return *status;
  return calibrate(f);
}

}  // namespace

int main(int argc, char** argv) {
  launch_prefer_passive_openmp(argv);  // as a training binary runs its kernels
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int status = 1;  // a failed calibration's status
  try {            // what escapes the steps' own handlers: one line, never std::terminate
    status = run(argc, argv, provided);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpgen-calibrate: internal error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, status);
  } catch (...) {
    std::fprintf(stderr, "fsdpgen-calibrate: internal error: an exception of unknown type\n");
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  MPI_Finalize();
  return status;
}
