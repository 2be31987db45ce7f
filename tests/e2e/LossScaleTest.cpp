// LossScale: dynamic loss scaling end to end. A step whose gradients overflow
// (injected with the binary's --inject-overflow, which makes every gradient of
// that step non-finite as an fp16 overflow does) is skipped on every rank:
// the weights after it are bit for bit those before it, the loss scale halves
// and training goes on with finite losses. Without fp16 the same non-finite
// gradients stop the run, naming the step and its rows.
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

TEST(LossScale, Fp16SkipsAnOverflowedStepBacksOffAndRecovers) {
  E2eConfig c;
  c.param = c.reduce_dtype = "fp16";
  c.micro_batches = 2;
  c.steps = 6;
  const std::filesystem::path bin = shared_binary(e2e_dir("loss_scale_fp16"), c.spec());

  expect_overflow_skipped_and_recovered(bin, c.world, 6, 2);
}

// Without fp16 loss scaling a non-finite gradient is no overflow to ride out
// but a broken run: the step is not applied and the run stops at once,
// naming the step and every rank's rows, with no checkpoint written after it.
TEST(LossScale, Fp32StopsOnNonFiniteGradientsNamingTheStepAndRows) {
  E2eConfig c;
  c.steps = 4;
  const std::filesystem::path bin = shared_binary(e2e_dir("loss_scale_fp32"), c.spec());
  const std::filesystem::path dir = bin.parent_path();
  std::filesystem::remove_all(dir / "ck");
  CmdResult r =
      run_binary(c.world, bin,
                 "--metrics m.jsonl --inject-overflow 1 --checkpoint-every 1 --checkpoint-dir ck");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("rank 0: error: step 2: the gradient norm is not finite"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  rank 0: sequences 4..5: synthetic(seed=7) sequence 4; synthetic(seed=7) "
                       "sequence 5\n  rank 1: sequences 6..7:"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "ck" / "step_00000001"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ck" / "step_00000002"))
      << "no checkpoint after the broken step";
}

// The spec's loss_scale: the scale each step used (metrics) follows its
// rules around an overflow injected in 0-based step `overflow`.
void expect_loss_scales(const std::string& name, const std::string& loss_scale, int overflow,
                        const std::vector<double>& want) {
  E2eConfig c;
  c.param = c.reduce_dtype = "fp16";
  c.world = 1;
  c.steps = static_cast<int>(want.size());
  std::string spec = c.spec();
  const std::string master = "master = fp32 }";
  spec.replace(spec.find(master), master.size(),
               "master = fp32  loss_scale = " + loss_scale + " }");
  const std::filesystem::path bin = shared_binary(e2e_dir(name), spec);
  CmdResult r =
      run_binary(c.world, bin, fmt::format("--metrics m.jsonl --inject-overflow {}", overflow));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
  ASSERT_EQ(m.size(), want.size());
  for (size_t s = 0; s < m.size(); ++s) {
    EXPECT_EQ(m[s].at("loss_scale").get<double>(), want[s]) << "step " << s + 1;
    EXPECT_EQ(m[s].at("skipped").get<bool>(), static_cast<int>(s) == overflow) << "step " << s + 1;
  }
}

TEST(LossScale, StaticScaleStaysThroughAnOverflow) {
  expect_loss_scales("loss_scale_static", "static(256)", 1, {256, 256, 256, 256});
}

TEST(LossScale, DynamicInitAndIntervalFromTheSpec) {
  // Doubles after 2 finite steps, halves at the overflow, counts again from 0.
  expect_loss_scales("loss_scale_dynamic", "dynamic(init = 1024, interval = 2)", 2,
                     {1024, 1024, 2048, 1024, 1024, 2048});
}

}  // namespace
}  // namespace fsdpgen::test
