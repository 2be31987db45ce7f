// GuardTest (cuda): the loss-spike guard on a GPU. Needs a GPU (skips, saying
// why, without one): a step whose losses and loss gradient --inject-spike
// multiplies is left out by the optimizer's gate on the device (in a replayed
// CUDA graph at world 1; through the comm layer's MPI test mode at world 2),
// the checkpoint after it holds the shards of the one before, and the loss
// check alone trips through the planned all-reduce of the loss.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/Device.h"
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

struct CudaGuardCase {
  std::string name, guard;
  int world;
};

class CudaGuard : public NeedsCudaDevice<::testing::TestWithParam<CudaGuardCase>> {};

TEST_P(CudaGuard, ASpikeIsLeftOutOnTheDevice) {
  const CudaGuardCase& g = GetParam();
  E2eConfig c;
  c.world = g.world;
  c.steps = 7;
  c.param = "bf16";
  c.train_extra = "  guard { " + g.guard + "  window = 3 }\n";
  const fs::path bin = build_binary(e2e_dir("cuda_guard_" + g.name), c.spec(), "cuda");
  const fs::path dir = bin.parent_path();
  fs::remove_all(dir / "ck");
  const CmdResult r =
      run_binary(c.world, bin,
                 "--metrics m.jsonl --inject-spike 4 --checkpoint-every 1 --checkpoint-keep 10 "
                 "--checkpoint-dir ck" +
                     std::string(c.world > 1 ? " --comm mpi-test" : ""));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("spike: step 5 not applied (the loss-spike guard)"), std::string::npos)
      << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 7u);
  for (size_t s = 0; s < m.size(); ++s)
    EXPECT_EQ(m[s].at("skipped").get<bool>(), s == 4) << "step " << s + 1;
  EXPECT_TRUE(checkpoint_shard_files(dir / "ck" / "step_00000005") ==
              checkpoint_shard_files(dir / "ck" / "step_00000004"))
      << "the shards after the left-out step differ from those before it";
  EXPECT_FALSE(checkpoint_shard_files(dir / "ck" / "step_00000006") ==
               checkpoint_shard_files(dir / "ck" / "step_00000004"));
}

INSTANTIATE_TEST_SUITE_P(Checks, CudaGuard,
                         ::testing::Values(CudaGuardCase{"both_w1", "loss_z = 6  norm_z = 6", 1},
                                           CudaGuardCase{"loss_w1", "loss_z = 6", 1},
                                           CudaGuardCase{"loss_w2", "loss_z = 6", 2},
                                           CudaGuardCase{"norm_w2", "norm_z = 6", 2}),
                         [](const ::testing::TestParamInfo<CudaGuardCase>& i) {
                           return i.param.name;
                         });

}  // namespace
}  // namespace fsdpgen::test
