// Checkpoint: what the checkpoint tests share (tests/e2e/Checkpoint*Test.cpp):
// a spec's shared binary and a test's own work directory, runs that must
// succeed or fail on every rank, and the bit-exact comparison of a run cut,
// checkpointed and resumed against the uninterrupted one.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {

namespace fs = std::filesystem;

// A binary of this spec shared by the tests (and their processes) that ask
// for `name`; every test writes its files into a work directory of its own.
inline fs::path binary(const std::string& name, const std::string& spec) {
  return shared_binary(e2e_dir("checkpoint_bin_" + name), spec);
}

// A test's own work directory, emptied.
inline fs::path work(const std::string& name) {
  fs::path d = fs::path(FSDPGEN_E2E_WORK) / ("checkpoint_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// The names in dir, sorted.
inline std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline bool has(const CmdResult& r, const std::string& part) {
  return r.out.find(part) != std::string::npos;
}

// Runs `world` ranks; the test fails unless the run succeeds.
inline CmdResult train(int world, const fs::path& bin, const std::string& args) {
  CmdResult r = run_binary(world, bin, args);
  EXPECT_EQ(r.status, 0) << r.out;
  return r;
}

// Runs `world` (> 1) ranks, each to its own end, and appends each rank's exit
// status as "rank R exit S": mpirun is told not to stop the others when one
// fails, which would hide a rank that hangs or does not see the error. env:
// variables set for the ranks.
inline CmdResult run_every_rank(int world, const fs::path& bin, const std::string& args,
                                const std::string& env = "") {
  allow_mpi_as_root();
  return run_command(
      fmt::format("cd {} && {} OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 120 mpirun -n {} "
                  "--oversubscribe --bind-to none sh -c '{} {}; echo \"rank "
                  "$OMPI_COMM_WORLD_RANK exit $?\"'",
                  bin.parent_path().string(), env, world, bin.string(), args));
}

// Every rank stopped by itself with exit status 1: none hung (timeout's 124),
// crashed or was killed.
inline void expect_every_rank_failed(const CmdResult& r, int world) {
  EXPECT_NE(r.status, 124) << "timed out: a rank hung\n" << r.out;
  for (int rank = 0; rank < world; ++rank)
    EXPECT_TRUE(has(r, fmt::format("rank {} exit 1\n", rank))) << r.out;
}

// Runs `world` ranks, which must each fail with every part in their output.
inline void expect_fails(int world, const fs::path& bin, const std::string& args,
                         const std::vector<std::string>& parts) {
  CmdResult r = run_every_rank(world, bin, args);
  expect_every_rank_failed(r, world);
  for (const std::string& p : parts)
    EXPECT_TRUE(has(r, p)) << args << "\nmissing: " << p << "\n" << r.out;
}

inline nlohmann::json manifest_of(const fs::path& checkpoint) {
  return nlohmann::json::parse(file_bytes(checkpoint / "manifest.json"));
}

// Trains c.steps steps straight, and the first `cut` with a checkpoint at the
// end and then the rest resumed from it: the metrics of every step (loss, norm,
// lr, loss scale, skipped) and the weights saved at the end are identical.
// Returns the work directory (straight.jsonl, ck/step_K, ...).
inline fs::path expect_resume_bit_exact(const std::string& name, const E2eConfig& c, int cut,
                                        const std::string& args = "") {
  const fs::path bin = binary(name, c.spec());
  const fs::path w = work(name);
  const std::string ck = (w / "ck").string();
  train(c.world, bin,
        fmt::format("{} --metrics {} --save {}", args, (w / "straight.jsonl").string(),
                    (w / "straight.safetensors").string()));
  // The whole run, checkpointed at the cut (--steps cut would be a shorter
  // run, its lr schedule ending at the cut).
  CmdResult first =
      train(c.world, bin,
            fmt::format(
                "{} --checkpoint-every {} --checkpoint-keep 1000 --checkpoint-dir {} --metrics {}",
                args, cut, ck, (w / "first.jsonl").string()));
  const std::string step_dir = fmt::format("{}/step_{:08}", ck, cut);
  EXPECT_TRUE(has(first, fmt::format("checkpoint: step {} written to {}", cut, step_dir)))
      << first.out;
  CmdResult resumed =
      train(c.world, bin,
            fmt::format("{} --resume {} --metrics {} --save {}", args, step_dir,
                        (w / "resumed.jsonl").string(), (w / "resumed.safetensors").string()));
  EXPECT_TRUE(has(resumed, fmt::format("weights: resumed from {} (step {}", step_dir, cut)))
      << resumed.out;

  const std::vector<nlohmann::json> straight = read_metrics(w / "straight.jsonl");
  std::vector<nlohmann::json> cut_run = read_metrics(w / "first.jsonl");
  const std::vector<nlohmann::json> rest = read_metrics(w / "resumed.jsonl");
  EXPECT_EQ(straight.size(), static_cast<size_t>(c.steps));
  EXPECT_EQ(cut_run.size(), static_cast<size_t>(c.steps));
  cut_run.resize(std::min(cut_run.size(), static_cast<size_t>(cut)));
  EXPECT_EQ(rest.size(), static_cast<size_t>(c.steps - cut));
  cut_run.insert(cut_run.end(), rest.begin(), rest.end());
  EXPECT_EQ(cut_run.size(), straight.size());
  for (size_t s = 0; s < std::min(straight.size(), cut_run.size()); ++s) {
    std::printf("step %zu: loss %.9g straight, %.9g %s\n", s + 1,
                straight[s].at("loss").get<double>(), cut_run[s].at("loss").get<double>(),
                s < static_cast<size_t>(cut) ? "before the checkpoint" : "resumed");
    EXPECT_EQ(cut_run[s].at("step"), s + 1);
    for (const char* key : {"loss", "grad_norm", "lr", "loss_scale", "skipped"})
      EXPECT_EQ(cut_run[s].at(key), straight[s].at(key)) << key << " of step " << s + 1;
  }
  const std::string a = file_bytes(w / "straight.safetensors"),
                    b = file_bytes(w / "resumed.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the final weights differ";
  return w;
}

inline E2eConfig steps(E2eConfig c, int n) {
  c.steps = n;
  return c;
}

// Copies checkpoint `from` to dir, for a test to damage.
inline fs::path copy_of(const fs::path& from, const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy(from, dir);
  return dir;
}

// A good checkpoint of the shared fp32 binary at step 2, in w/good.
inline fs::path good_checkpoint(const fs::path& bin, const fs::path& w) {
  train(2, bin,
        fmt::format("--steps 2 --checkpoint-every 2 --checkpoint-dir {}", (w / "good").string()));
  return w / "good" / "step_00000002";
}

inline std::string resume(const fs::path& p) {
  return fmt::format("--resume {}", p.string());
}

// optimizer = muon(...): the AdamW state of a shard's other elements and
// each matrix's momentum, which its owner keeps, go into the checkpoint's
// two planes at the matrices' places and come back to the owners: a resumed
// run is the straight run, bit for bit. Full_shard over 2 ranks, written at
// once (--checkpoint-every); llama hybrid 2x2 with 2 micro-batches, written
// behind the steps (the spec's checkpoint plans the staging buffer).
inline constexpr const char* kMuon =
    "muon(lr = 0.02, momentum = 0.95, weight_decay = 0.01, adamw = adamw(lr = 1e-2))";

}  // namespace fsdpgen::test
