// Subprocess: spawn, wait with a deadline, how it ended; see Subprocess.h.
#include "dsl/layer_reader/Subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

extern char** environ;

namespace fsdpgen::layers {

ProcessEnd run_to_file(std::vector<std::string> args, const std::string& out_file, int seconds) {
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  const int err = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) return {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  for (auto wait = std::chrono::milliseconds(1);; wait = std::min(wait * 2, decltype(wait)(50))) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {ProcessEnd::timed_out};
    }
    std::this_thread::sleep_for(wait);
  }
  if (WIFSIGNALED(status)) return {ProcessEnd::killed, WTERMSIG(status)};
  return {ProcessEnd::exited, WEXITSTATUS(status)};
}

}  // namespace fsdpgen::layers
