// watchdog: the per-rank monitor thread, the watch directory and the stall
// report.
#include "runtime/train/watchdog.h"

#include <mpi.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/human.h"
#include "runtime/trace.h"

namespace {

constexpr const char* kStreamNames[kStreamCount] = {"compute",    "all-gather", "reduce-scatter",
                                                    "all-reduce", "copy",       "host"};

bool is_collective(const program& p, int op) {
  if (op == kWatchLossAllReduce || op == kWatchStragglerGather || op == kWatchCheckpointAgree)
    return true;
  if (op == kWatchCheckpointWrite) return false;
  return op_kind_is_collective(p.ops[op].kind);
}

// "op 57 (F u12 s0 mb0: forward, compute stream)".
std::string op_text(const program& p, int op, int stream) {
  if (op == kWatchLossAllReduce) return "the loss all-reduce after the step's ops";
  if (op == kWatchStragglerGather) return "the straggler gather after the step's ops";
  if (op == kWatchCheckpointWrite) return "writing its checkpoint shard after the step";
  if (op == kWatchCheckpointAgree)
    return "the checkpoint's agreement after the step (every rank's shard written)";
  if (op < 0 || op >= p.op_count) return fmt::format("op {} (not in this program)", op);
  const program_op& o = p.ops[op];
  return fmt::format("op {} ({}: {}, {} stream)", op, o.label, op_kind_name(o.kind),
                     kStreamNames[stream]);
}

std::string seconds_text(int64_t ns) {
  const double s = static_cast<double>(ns) / 1e9;
  return s < 100 ? fmt::format("{:.1f} s", s) : fmt::format("{:.0f} s", s);
}

// A predicted time: "3.1 ms", "250 us", "2.4 s".
std::string predicted_text(double s) {
  if (s < 1e-3) return fmt::format("{:.3g} us", s * 1e6);
  if (s < 1) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} s", s);
}

double predicted_seconds(const program& p, int op) {
  return op >= 0 && op < p.op_count ? p.ops[op].predicted_s : 0;
}

// "0-2 and 4-7", "0, 2 and 5".
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::vector<std::string> parts;
  for (const auto& [first, last] : rank_runs(ranks))
    parts.push_back(first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", out);
}

// The stream whose running op started first (-1: none runs).
int oldest_stream(const watch_record& r) {
  int best = -1;
  for (int s = 0; s < kStreamCount; ++s)
    if (r.op[s] != -1 && (best < 0 || r.entered_ns[s] < r.entered_ns[best])) best = s;
  return best;
}

std::string step_text(const watch_record& r) {
  if (r.step < 0) return "the start (before the first step)";
  if (r.validation_pass >= 0)
    return fmt::format("the validation after step {} (pass {})", r.step + 1, r.validation_pass + 1);
  return fmt::format("step {}", r.step + 1);
}

// The rank the others wait for: dead, else silent, else the one whose
// oldest running op is not a collective (the oldest such), else one that
// runs no op while others are in collectives, else the oldest op's.
size_t held_up_by(const program& p, const std::vector<watch_view>& ranks) {
  for (watch_liveness l : {watch_liveness::dead, watch_liveness::silent})
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i].liveness == l) return i;
  size_t best = ranks.size(), idle = ranks.size(), oldest = ranks.size();
  auto older = [&](size_t a, size_t b) {
    if (b == ranks.size()) return true;
    const watch_record &ra = ranks[a].record, &rb = ranks[b].record;
    return ra.entered_ns[oldest_stream(ra)] < rb.entered_ns[oldest_stream(rb)];
  };
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].liveness != watch_liveness::answering) continue;
    const watch_record& r = ranks[i].record;
    const int s = oldest_stream(r);
    if (s < 0) {
      if (idle == ranks.size()) idle = i;
      continue;
    }
    if (older(i, oldest)) oldest = i;
    if (!is_collective(p, r.op[s]) && older(i, best)) best = i;
  }
  if (best < ranks.size()) return best;
  if (idle < ranks.size()) return idle;
  return oldest < ranks.size() ? oldest : 0;
}

std::string rank_line(const program& p, const watch_view& v, int64_t now_ns) {
  const watch_record& r = v.record;
  if (v.liveness == watch_liveness::missing)
    return fmt::format("  rank {}: no record (it never reached the watchdog)\n", r.rank);
  std::string line =
      fmt::format("  rank {} (pid {} on {}): {}, ", r.rank, r.pid, r.host, step_text(r));
  line += v.liveness == watch_liveness::dead ? "dead (its process is gone)"
          : v.liveness == watch_liveness::silent
              ? fmt::format("stopped answering {} ago", seconds_text(now_ns - r.heartbeat_ns))
              : "answering";
  bool any = false;
  for (int s = 0; s < kStreamCount; ++s) {
    if (r.op[s] == -1) continue;
    line += fmt::format("; in {} for {}", op_text(p, r.op[s], s),
                        seconds_text(now_ns - r.entered_ns[s]));
    any = true;
  }
  if (!any) line += "; no op running";
  return line + "\n";
}

std::string where_text(const program& p, const watch_record& r, int64_t now_ns) {
  const int s = oldest_stream(r);
  if (s < 0) return "running no op of the step";
  const double predicted = predicted_seconds(p, r.op[s]);
  return fmt::format(
      "in {} for {}{}", op_text(p, r.op[s], s), seconds_text(now_ns - r.entered_ns[s]),
      predicted > 0 ? fmt::format(" (predicted {})", predicted_text(predicted)) : "");
}

int64_t wall_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) done += static_cast<size_t>(n);
  }
}

// stdout's buffered lines, unless another thread holds it (stuck in a write).
void flush_stdout() {
  if (ftrylockfile(stdout) != 0) return;
  fflush_unlocked(stdout);
  funlockfile(stdout);
}

bool usable_directory(const std::string& dir) {
  struct stat st {};
  return !dir.empty() && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::access(dir.c_str(), W_OK | X_OK) == 0;
}

// Where rank 0 makes the watch directory, and a note when ranks on other
// nodes cannot see it.
std::string parent_directory(const watchdog_options& o, int64_t world, int64_t local_size,
                             const std::string& checkpoint_dir, bool checkpoints,
                             std::string& note) {
  if (!o.watch_dir.empty()) return o.watch_dir;
  if (local_size == world && usable_directory("/dev/shm")) return "/dev/shm";
  if (checkpoints) {
    const std::filesystem::path parent =
        std::filesystem::absolute(checkpoint_dir).lexically_normal().parent_path();
    if (usable_directory(parent.string())) return parent.string();
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : "/tmp";
  if (local_size < world)
    note = fmt::format(
        "note: watchdog: the ranks span several nodes and no shared directory was given "
        "(--watch-dir, or checkpoints); a stall report from {} names only this node's ranks\n",
        dir);
  return dir;
}

// Removes the watch directories under `parent` that jobs killed whole (by a
// scheduler, or mpirun after a SIGKILL) left: every record in it names a
// process of this host that is gone.
void remove_abandoned_directories(const std::string& parent) {
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator(parent, ec)) {
    if (d.path().filename().string().rfind("fsdpgen-watch-", 0) != 0) continue;
    bool abandoned = true, any = false;
    for (const auto& f : std::filesystem::directory_iterator(d.path(), ec)) {
      watch_record r;
      const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
      const bool read = fd >= 0 && ::pread(fd, &r, sizeof r, 0) == static_cast<ssize_t>(sizeof r);
      if (fd >= 0) ::close(fd);
      r.host[sizeof r.host - 1] = '\0';
      any = true;
      if (!read || r.magic != kWatchRecordMagic || std::strcmp(r.host, host) != 0 ||
          ::kill(static_cast<pid_t>(r.pid), 0) == 0 || errno != ESRCH)
        abandoned = false;
    }
    if (abandoned && any) std::filesystem::remove_all(d.path(), ec);
  }
}

class monitor final : public watchdog {
 public:
  monitor(const program& p, const watchdog_options& o, int64_t checkpoint_bytes, int64_t rank,
          int64_t world, std::string dir)
      : p_(p), rank_(rank), world_(world), dir_(std::move(dir)), stall_path_(dir_ + "/stall") {
    limits_ = {o.stall_timeout_s, checkpoint_bytes};
    timeout_ns_ = static_cast<int64_t>(o.stall_timeout_s * 1e9);
    // At least four looks per timeout, at most one a second.
    tick_ns_ = std::clamp<int64_t>(timeout_ns_ / 4, 50'000'000, 1'000'000'000);
    silent_ns_ = 3 * tick_ns_;
    // Ranks on other nodes, where the directory is not shared, make their own.
    made_here_ = rank_ == 0 || ::mkdir(dir_.c_str(), 0700) == 0;
    const std::string path = record_path(rank_);
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw runtime_error(fmt::format("watchdog: cannot write {}: {}", path, std::strerror(errno)));
    record_.magic = kWatchRecordMagic;
    record_.rank = rank_;
    record_.pid = ::getpid();
    ::gethostname(record_.host, sizeof record_.host - 1);
    publish();
    thread_ = std::thread([this] { loop(); });
  }

  ~monitor() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    ::close(fd_);
    ::unlink(record_path(rank_).c_str());
    if (made_here_) remove_directory();
  }

 private:
  std::string record_path(int64_t rank) const { return fmt::format("{}/rank_{}", dir_, rank); }
  const std::string& stall_path() const { return stall_path_; }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::nanoseconds(tick_ns_), [this] { return stop_; })) {
      publish();
      check();
    }
  }

  // This rank's record, rewritten whole (allocates nothing: it runs beside
  // the steps, whose allocations are counted).
  void publish() {
    const watch_status& w = watch_process_status();
    const int64_t now_wall = wall_ns(), now = trace_clock_ns();
    record_.sequence += 1;
    record_.step = w.step.load(std::memory_order_relaxed);
    record_.validation_pass = w.validation_pass.load(std::memory_order_relaxed);
    record_.heartbeat_ns = now_wall;
    for (int s = 0; s < kStreamCount; ++s) {
      int32_t op = 0;
      int64_t entered = 0;
      do {  // the op and its start as one pair
        op = w.streams[s].op.load(std::memory_order_acquire);
        entered = w.streams[s].entered_ns.load(std::memory_order_relaxed);
      } while (op != w.streams[s].op.load(std::memory_order_acquire));
      record_.op[s] = op;
      record_.entered_ns[s] = op == -1 ? 0 : now_wall - (now - entered);
    }
    merge_gpu_marks(now_wall, now);
    record_.sequence_end = record_.sequence;
    (void)::pwrite(fd_, &record_, sizeof record_, 0);
  }

  // The GPU's marks, on a GPU with them (else nothing: the CPU's record as it was).
  void merge_gpu_marks(int64_t now_wall, int64_t now) {
    watch_status& w = watch_process_status();
    std::lock_guard<std::mutex> lock(w.gpu_marks_mutex);
    if (!w.gpu_marks) return;
    watch_merge_gpu_marks(gpu_, w.gpu_marks, w.gpu_run.load(std::memory_order_acquire), now,
                          now_wall, record_);
  }

  void check() {
    if (::access(stall_path().c_str(), F_OK) == 0) exit_reported_elsewhere();
    for (int s = 0; s < kStreamCount; ++s)
      if (record_.op[s] != -1 && record_.heartbeat_ns - record_.entered_ns[s] >
                                     watch_op_limit_ns(p_, record_.op[s], limits_))
        report_and_exit();
  }

  watch_view read_view(int64_t rank, int64_t now_wall) const {
    watch_view v;
    v.record.rank = rank;
    const int fd = ::open(record_path(rank).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return v;
    for (int attempt = 0; attempt < 5; ++attempt) {
      watch_record r;
      if (::pread(fd, &r, sizeof r, 0) == static_cast<ssize_t>(sizeof r) &&
          r.magic == kWatchRecordMagic && r.sequence == r.sequence_end && r.rank == rank) {
        v.record = r;
        v.record.host[sizeof r.host - 1] = '\0';
        v.liveness = watch_liveness::answering;
        break;
      }
    }
    ::close(fd);
    if (v.liveness == watch_liveness::missing) return v;
    if (std::strcmp(v.record.host, record_.host) == 0 &&
        ::kill(static_cast<pid_t>(v.record.pid), 0) != 0 && errno == ESRCH)
      v.liveness = watch_liveness::dead;
    else if (now_wall - v.record.heartbeat_ns > silent_ns_)
      v.liveness = watch_liveness::silent;
    return v;
  }

  [[noreturn]] void report_and_exit() {
    const int64_t now_wall = wall_ns();
    std::vector<watch_view> views;
    for (int64_t r = 0; r < world_; ++r)
      views.push_back(read_view(r, now_wall));
    const std::string report = watch_report(p_, views, now_wall, limits_);
    // The claim, with this rank in it, appears at once: written aside, then linked.
    const std::string mine = fmt::format("{}.{}", stall_path(), rank_);
    const int fd = ::open(mine.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_all(fd, fmt::format("{}\n", rank_));
      ::close(fd);
    }
    const bool claimed = fd >= 0 && ::link(mine.c_str(), stall_path().c_str()) == 0;
    const int why = errno;
    ::unlink(mine.c_str());
    if (!claimed && why == EEXIST) exit_reported_elsewhere();
    if (!claimed && std::all_of(views.begin(), views.end(), [](const watch_view& v) {
          return v.liveness == watch_liveness::missing;
        })) {
      // The reporter removed the directory (this rank was stopped meanwhile).
      write_all(STDERR_FILENO, fmt::format("rank {}: stopping: the watch directory {} is gone "
                                           "(another rank reported a stall)\n",
                                           rank_, dir_));
      ::_exit(kStalledExitCode);
    }
    flush_stdout();
    write_all(STDERR_FILENO, report);
    if (claimed) {
      wait_for_answering_ranks(views);
      remove_directory();
    }
    ::_exit(kStalledExitCode);
  }

  // The ranks that answered see the report claimed within a tick and say so,
  // removing their records; then the directory can go.
  void wait_for_answering_ranks(const std::vector<watch_view>& views) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(3 * tick_ns_);
    for (const watch_view& v : views) {
      if (v.liveness != watch_liveness::answering || v.record.rank == rank_) continue;
      while (::access(record_path(v.record.rank).c_str(), F_OK) == 0 &&
             std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  [[noreturn]] void exit_reported_elsewhere() {
    char text[32] = {};
    const int fd = ::open(stall_path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)::read(fd, text, sizeof text - 1);
      ::close(fd);
    }
    const long reporter = std::strtol(text, nullptr, 10);
    flush_stdout();
    write_all(STDERR_FILENO,
              text[0]
                  ? fmt::format("rank {}: stopping: rank {} reported a stall\n", rank_, reporter)
                  : fmt::format("rank {}: stopping: a stall was reported\n", rank_));
    ::unlink(record_path(rank_).c_str());
    // No rank exits before the reporter removed the directory: under mpirun
    // the first exit ends the job.
    const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(4 * tick_ns_);
    while (::access(dir_.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::_exit(kStalledExitCode);
  }

  void remove_directory() const {
    for (int64_t r = 0; r < world_; ++r)
      ::unlink(record_path(r).c_str());
    ::unlink(stall_path().c_str());
    ::rmdir(dir_.c_str());
  }

  const program& p_;
  const int64_t rank_, world_;
  const std::string dir_;
  const std::string stall_path_;  // made once: a tick allocates nothing
  watch_limits limits_;
  int64_t timeout_ns_ = 0, tick_ns_ = 0, silent_ns_ = 0;
  int fd_ = -1;
  bool made_here_ = false;  // rank 0, or a rank on a node the directory is not shared with
  watch_record record_;
  watch_gpu_view gpu_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

int64_t watch_op_limit_ns(const program& p, int op, const watch_limits& l) {
  if (op == kWatchCheckpointWrite || op == kWatchCheckpointAgree)
    return static_cast<int64_t>(
        std::max(l.timeout_s, static_cast<double>(l.checkpoint_bytes) / kWatchCheckpointBytesPerS) *
        1e9);
  return static_cast<int64_t>(
      std::max(l.timeout_s, kWatchPredictedFactor * predicted_seconds(p, op)) * 1e9);
}

void watch_merge_gpu_marks(watch_gpu_view& v, const volatile int32_t* marks, int64_t run,
                           int64_t now_ns, int64_t now_wall_ns, watch_record& r) {
  for (int s = 0; s < kStreamCount; ++s) {
    const int32_t op = marks[s];
    if (op != v.op[s] || run != v.run) v.since_ns[s] = now_ns;
    v.op[s] = op;
    if (op == -1) continue;
    const int64_t entered = now_wall_ns - (now_ns - v.since_ns[s]);
    if (r.op[s] == -1 || entered < r.entered_ns[s]) {
      r.op[s] = op;
      r.entered_ns[s] = entered;
    }
  }
  v.run = run;
}

std::string watch_report(const program& p, const std::vector<watch_view>& ranks, int64_t now_ns,
                         const watch_limits& l) {
  if (ranks.empty()) return "stall: no rank's record to report\n";
  const size_t k = held_up_by(p, ranks);
  const watch_view& held = ranks[k];
  const watch_record& r = held.record;
  // The step the job is in: the held rank's, unless its record is stale.
  const watch_record* at = &r;
  for (const watch_view& v : ranks)
    if (held.liveness != watch_liveness::answering && v.liveness == watch_liveness::answering &&
        (at == &r || v.record.step > at->step))
      at = &v.record;
  std::string head = fmt::format("stall at {}: rank {} ", step_text(*at), r.rank);
  switch (held.liveness) {
    case watch_liveness::dead:
      head += fmt::format("(pid {}) is dead (its process is gone), last {}", r.pid,
                          where_text(p, r, now_ns));
      break;
    case watch_liveness::silent:
      head += fmt::format("stopped answering {} ago (a stopped or wedged process), last {}",
                          seconds_text(now_ns - r.heartbeat_ns), where_text(p, r, now_ns));
      break;
    case watch_liveness::answering:
      head += fmt::format("has been {}", where_text(p, r, now_ns));
      break;
    case watch_liveness::missing:
      head += "wrote no record";
      break;
  }
  // The others, grouped by where they wait: the op they run longest, or none.
  std::map<std::pair<int, int>, std::vector<int64_t>> waiting;  // (op, stream) -> ranks
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == k || ranks[i].liveness != watch_liveness::answering) continue;
    const int s = oldest_stream(ranks[i].record);
    waiting[{s < 0 ? -1 : ranks[i].record.op[s], s}].push_back(ranks[i].record.rank);
  }
  for (const auto& [where, who] : waiting) {
    const bool one = who.size() == 1;
    head += where.second < 0
                ? fmt::format("; {} {} no op of the step", ranks_text(who), one ? "runs" : "run")
                : fmt::format("; {} {} in {}", ranks_text(who), one ? "waits" : "wait",
                              op_text(p, where.first, where.second));
  }
  if (!waiting.empty()) head += fmt::format(" for rank {}", r.rank);
  const int held_stream = oldest_stream(r);
  const int held_op = held_stream < 0 ? 0 : r.op[held_stream];
  const int64_t limit_ns = held_stream < 0 ? 0 : watch_op_limit_ns(p, held_op, l);
  // Why the limit is longer than the timeout: a checkpoint's size, or the op's prediction.
  const bool checkpoint = held_op == kWatchCheckpointWrite || held_op == kWatchCheckpointAgree;
  const std::string why =
      checkpoint ? fmt::format("this rank's {:.2f} GB of checkpoint at {:g} MB/s",
                               static_cast<double>(l.checkpoint_bytes) / 1e9,
                               kWatchCheckpointBytesPerS / 1e6)
                 : fmt::format("{:g} x the op's predicted time", kWatchPredictedFactor);
  std::string out =
      head + (static_cast<double>(limit_ns) > l.timeout_s * 1e9
                  ? fmt::format(" (stall limit {}: {})\n", seconds_text(limit_ns), why)
                  : fmt::format(" (stall timeout {:g} s)\n", l.timeout_s));
  for (const watch_view& v : ranks)
    out += rank_line(p, v, now_ns);
  out += fmt::format(
      "every rank stops with exit code {} (stalled); the last complete checkpoint is intact\n",
      kStalledExitCode);
  return out;
}

std::unique_ptr<watchdog> watchdog_start(const program& p, const watchdog_options& o, int64_t rank,
                                         int64_t world, int64_t local_size,
                                         const std::string& checkpoint_dir, bool checkpoints,
                                         int64_t checkpoint_bytes) {
  std::string error, dir, note;
  if (rank == 0) {
    const std::string parent =
        parent_directory(o, world, local_size, checkpoint_dir, checkpoints, note);
    remove_abandoned_directories(parent);
    std::string pattern = parent + "/fsdpgen-watch-XXXXXX";
    if (::mkdtemp(pattern.data()))
      dir = pattern;
    else
      error = fmt::format("{}the watchdog cannot make its directory in {}: {}",
                          o.watch_dir.empty() ? "" : "--watch-dir: ", parent, std::strerror(errno));
    if (!note.empty()) std::fputs(note.c_str(), stdout);
  }
  agree_on_error(error, "starting the watchdog");
  int64_t n = static_cast<int64_t>(dir.size());
  comm_broadcast(MPI_COMM_WORLD, &n, sizeof n, 0);
  dir.resize(static_cast<size_t>(n));
  comm_broadcast(MPI_COMM_WORLD, dir.data(), n, 0);
  std::unique_ptr<watchdog> w;
  try {
    w = std::make_unique<monitor>(p, o, checkpoint_bytes, rank, world, dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "starting the watchdog");
  return w;
}

std::string watch_parse_injected_stall(const std::string& text, int64_t world,
                                       watch_injected_stall& out) {
  long long rank = -1, step = -1;
  double seconds = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%lld:%lld:%lf%n", &rank, &step, &seconds, &used) != 3 ||
      used != static_cast<int>(text.size()) || rank < 0 || step < 0 || !(seconds > 0) ||
      !std::isfinite(seconds))
    return fmt::format(
        "expected RANK:STEP:SECONDS (a rank, a 0-based step and a number of seconds > 0), got "
        "'{}'",
        text);
  if (rank >= world) return fmt::format("rank {} is not below the world of {} ranks", rank, world);
  out = {rank, step, seconds};
  return "";
}
