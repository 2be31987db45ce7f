// LossScale: dynamic loss scaling end to end. A step whose gradients overflow
// (injected with the binary's --inject-overflow, which makes every gradient of
// that step non-finite as an fp16 overflow does) is skipped on every rank:
// the weights after it are bit for bit those before it, the loss scale halves
// and training goes on with finite losses. The same guard keeps an fp32 run's
// weights finite.
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

TEST(LossScale, Fp32SkipsNonFiniteGradientsWithoutScaling) {
  E2eConfig c;
  c.steps = 4;
  const std::filesystem::path bin = shared_binary(e2e_dir("loss_scale_fp32"), c.spec());
  CmdResult r = run_binary(c.world, bin, "--metrics m.jsonl --inject-overflow 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 step skipped for non-finite gradients\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" | scale "), std::string::npos) << "fp32 logs no loss scale";
  const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  for (size_t s = 0; s < m.size(); ++s) {
    EXPECT_EQ(m[s].at("skipped").get<bool>(), s == 1) << "step " << s + 1;
    EXPECT_EQ(m[s].at("loss_scale").get<double>(), 1.0);
    EXPECT_TRUE(std::isfinite(m[s].at("loss").get<double>())) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace fsdpgen::test
