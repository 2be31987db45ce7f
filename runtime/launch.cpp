// launch: environment detection, self re-launch, MPI start-up and handshake.
#include "runtime/launch.h"

#include <mpi.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>
#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/check.h"

namespace {

bool has_env(const char* name) {
  return std::getenv(name) != nullptr;
}

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p = path;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string candidate = p.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string command_line(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args)
    s += (s.empty() ? "" : " ") + a;
  return s;
}

// mpirun's pid while this process waits for it (0 before it starts).
volatile sig_atomic_t g_mpirun = 0;

// SIGTERM (a scheduler or `kill` stopping this process) becomes SIGUSR1 for
// mpirun, which forwards it to every rank: they stop after the same step with
// a checkpoint and exit 0, where a SIGTERM to mpirun would kill them.
void forward_to_mpirun(int sig) {
  if (g_mpirun > 0) kill(static_cast<pid_t>(g_mpirun), sig == SIGINT ? SIGINT : SIGUSR1);
}

// Runs mpirun as a child (not exec: this process, the one its user started,
// stays to translate signals) and returns what the job's exit status should be.
int run_mpirun(char** args) {
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "error: could not start mpirun: %s\n", std::strerror(errno));
    return 2;
  }
  if (child == 0) {
    execvp("mpirun", args);
    std::fprintf(stderr, "error: could not run mpirun: %s\n", std::strerror(errno));
    _exit(2);
  }
  g_mpirun = child;
  struct sigaction sa {};
  sa.sa_handler = forward_to_mpirun;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGUSR1, SIGINT})
    sigaction(sig, &sa, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) {
      std::fprintf(stderr, "error: waiting for mpirun: %s\n", std::strerror(errno));
      return 2;
    }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Set in the environment of the ranks a binary started alone re-launched.
constexpr const char* kRelaunchedVariable = "FSDPGEN_RELAUNCHED";

[[noreturn]] void relaunch_or_explain(const program& p, int argc, char** argv) {
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(p.parallel.world)};
  if (static_cast<unsigned>(p.parallel.world) > std::thread::hardware_concurrency())
    args.push_back("--oversubscribe");
  for (int i = 0; i < argc; ++i)
    args.push_back(argv[i]);
  if (!on_path("mpirun") || has_env("FSDPGEN_NO_RELAUNCH")) {
    std::fprintf(stderr,
                 "error: this binary trains on %lld ranks (%s) and was started as a single "
                 "process; run:\n  %s\n",
                 static_cast<long long>(p.parallel.world), p.spec_path, command_line(args).c_str());
    std::exit(2);
  }
  std::fprintf(stderr, "train: %lld ranks needed; re-launching as: %s\n",
               static_cast<long long>(p.parallel.world), command_line(args).c_str());
  std::fflush(stderr);
  setenv(kRelaunchedVariable, "1", 1);  // the ranks' stop message says how it was started
  if (geteuid() == 0) {                 // Open MPI refuses root unless told
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::vector<char*> cargs;
  for (std::string& a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::exit(run_mpirun(cargs.data()));
}

// Every rank learns every rank's program hash and world; returns an error
// message (the same on every rank) or "".
std::string handshake(const program& p, int64_t world) {
  struct entry {
    uint64_t hash;
    int64_t world;
  } mine{p.hash, p.parallel.world};
  std::vector<entry> all(static_cast<size_t>(world));
  MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                          MPI_COMM_WORLD));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r].hash != all[0].hash || all[r].world != all[0].world)
      return fmt::format(
          "ranks run different programs: rank 0 has schedule hash {:016x} (world {}), rank {} "
          "has {:016x} (world {}); launch one binary generated from one spec on every rank",
          all[0].hash, all[0].world, r, all[r].hash, all[r].world);
  return "";
}

}  // namespace

// Set by mpirun / prterun, srun --mpi=pmix, or other PMI launchers.
bool launch_under_mpi_launcher() {
  return has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMIX_RANK") || has_env("PMI_RANK") ||
         has_env("PMI_SIZE");
}

void launch_prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // on failure, go on with the default policy
}

launch_info launch_init(const program& p, int argc, char** argv) {
  launch_info info;
  const bool srun = has_env("SLURM_PROCID") && has_env("SLURM_STEP_ID");
  if (!launch_under_mpi_launcher()) {
    const char* ntasks = std::getenv("SLURM_STEP_NUM_TASKS");
    if (srun && ntasks && std::atoll(ntasks) > 1) {
      if (std::string(std::getenv("SLURM_PROCID")) == "0")
        std::fprintf(stderr,
                     "error: started by srun without an MPI plugin, so the %s tasks cannot talk; "
                     "run: srun -n %lld --mpi=pmix %s\n",
                     ntasks, static_cast<long long>(p.parallel.world), argv[0]);
      std::exit(2);
    }
    if (p.parallel.world > 1) relaunch_or_explain(p, argc, argv);
  }
  info.relaunched = has_env(kRelaunchedVariable);
  info.launcher = has_env("OMPI_COMM_WORLD_SIZE") ? "mpirun"
                  : srun                          ? "srun"
                  : launch_under_mpi_launcher()   ? "pmi"
                                                  : "single process";
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr,
                 "error: this MPI does not provide MPI_THREAD_MULTIPLE (got level %d); the "
                 "runtime issues collectives from one thread per stream\n",
                 provided);
    MPI_Finalize();
    std::exit(2);
  }
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  info.rank = rank;
  info.world = world;

  std::string mismatch = handshake(p, world);
  if (!mismatch.empty()) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", mismatch.c_str());  // the same on every rank
    MPI_Finalize();
    std::exit(2);
  }
  if (world != p.parallel.world) {
    if (rank == 0)
      std::fprintf(stderr,
                   "error: this binary was generated for world %lld (%s) but was launched on %d "
                   "rank%s; run: mpirun -n %lld %s (or srun -n %lld --mpi=pmix %s), or "
                   "regenerate with: fsdpgen %s --world %d -o %s\n",
                   static_cast<long long>(p.parallel.world), p.spec_path, world,
                   world == 1 ? "" : "s", static_cast<long long>(p.parallel.world), argv[0],
                   static_cast<long long>(p.parallel.world), argv[0], p.spec_path, world, argv[0]);
    MPI_Finalize();
    std::exit(2);
  }

  info.where = placement_gather();
  int local_rank = 0, local_size = 1;
  launch_local_rank(local_rank, local_size);
  info.local_rank = local_rank;
  info.local_size = local_size;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  info.threads = std::max(1, cores / local_size);
  if (const char* t = std::getenv("OMP_NUM_THREADS")) info.threads = std::max(1, std::atoi(t));
  omp_set_num_threads(info.threads);
  openblas_set_num_threads(info.threads);
  return info;
}

void launch_finalize() {
  MPI_Finalize();
}

placement_plan launch_plan(const program& p) {
  return {p.parallel.world, p.parallel.shard_group, p.parallel.ranks_per_node};
}

void launch_local_rank(int& local_rank, int& local_size) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank));
  MPI_CHECK(MPI_Comm_size(local, &local_size));
  MPI_CHECK(MPI_Comm_free(&local));
}
