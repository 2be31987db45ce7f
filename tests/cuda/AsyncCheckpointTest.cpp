// AsyncCheckpointTest (cuda): a spec with checkpoint(every = 2) on a GPU
// copies each checkpoint's shards from the device into the pinned host
// arena's staging buffer and writes them behind the next steps. Needs a GPU
// (skips, saying why, without one): the files equal --checkpoint-sync's byte
// for byte, and a run resumed from one continues bit for bit; at world 2
// (ranks sharing the GPU through the comm layer's MPI test mode) too.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/cuda/Device.h"
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = file_bytes(e.path());
  return out;
}

class CudaAsyncCheckpoint : public NeedsCudaDevice<::testing::TestWithParam<int>> {};

TEST_P(CudaAsyncCheckpoint, FilesAreTheSyncOnesAndResumeIsBitExact) {
  E2eConfig c;
  c.world = GetParam();
  c.steps = 6;
  c.param = "bf16";
  c.train_extra = "  checkpoint(every = 2, dir = \"ck\", keep = 100)\n";
  const std::string comm = c.world > 1 ? " --comm mpi-test" : "";
  const fs::path built =
      build_binary(e2e_dir(fmt::format("cuda_async_ck_w{}", c.world)), c.spec(), "cuda");
  fs::path bins[2];
  for (int k = 0; k < 2; ++k) {
    const fs::path dir = built.parent_path() / (k == 0 ? "async" : "sync");
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(built, dir / "train");
    bins[k] = dir / "train";
  }
  const std::string args = "--metrics m.jsonl --save final.safetensors" + comm;
  const CmdResult async_run = run_binary(c.world, bins[0], args);
  ASSERT_EQ(async_run.status, 0) << async_run.out;
  const CmdResult sync_run = run_binary(c.world, bins[1], args + " --checkpoint-sync");
  ASSERT_EQ(sync_run.status, 0) << sync_run.out;
  EXPECT_NE(async_run.out.find("checkpoint: step 2 written to ck/step_00000002 ("),
            std::string::npos)
      << async_run.out;
  EXPECT_NE(async_run.out.find("behind the next steps"), std::string::npos) << async_run.out;
  EXPECT_NE(async_run.out.find(": 0 by fsdpgen"), std::string::npos) << async_run.out;
  const fs::path a = bins[0].parent_path(), s = bins[1].parent_path();
  for (int step : {2, 4, 6}) {
    const std::string name = fmt::format("step_{:08}", step);
    EXPECT_TRUE(files_of(a / "ck" / name) == files_of(s / "ck" / name))
        << name << ": the async and the synchronous checkpoints differ";
  }
  const CmdResult resumed = run_binary(
      c.world, bins[0],
      "--resume ck/step_00000002 --metrics resumed.jsonl --save resumed.safetensors" + comm);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  const std::vector<double> straight = read_losses(a / "m.jsonl"),
                            rest = read_losses(a / "resumed.jsonl");
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_EQ(rest.size(), 4u);
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_EQ(rest[i], straight[i + 2]) << "step " << i + 3;
  EXPECT_EQ(safetensors_tensor_bytes(a / "final.safetensors"),
            safetensors_tensor_bytes(a / "resumed.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Worlds, CudaAsyncCheckpoint, ::testing::Values(1, 2));

}  // namespace
}  // namespace fsdpgen::test
