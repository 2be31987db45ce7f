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
  const std::filesystem::path dir = bin.parent_path();

  CmdResult r = run_binary(c.world, bin, "--metrics m.jsonl --inject-overflow 2");
  ASSERT_EQ(r.status, 0) << r.out;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("1 step skipped for non-finite gradients (loss scale now 32768)"),
            std::string::npos)
      << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 6u);
  for (size_t s = 0; s < m.size(); ++s) {
    const bool overflowed = s == 2;
    EXPECT_EQ(m[s].at("skipped").get<bool>(), overflowed) << "step " << s + 1;
    EXPECT_EQ(m[s].at("loss_scale").get<double>(), s <= 2 ? 65536.0 : 32768.0) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(m[s].at("loss").get<double>())) << "step " << s + 1;
    if (!overflowed) {
      EXPECT_TRUE(std::isfinite(m[s].at("grad_norm").get<double>())) << "step " << s + 1;
    }
  }
  EXPECT_LT(m.back().at("loss").get<double>(), m.front().at("loss").get<double>())
      << "training goes on after the skipped step";

  // The skipped step changed nothing: 3 steps whose last overflowed leave the
  // weights of 2 steps.
  ASSERT_EQ(run_binary(c.world, bin, "--steps 2 --save two.safetensors").status, 0);
  CmdResult skipped =
      run_binary(c.world, bin, "--steps 3 --inject-overflow 2 --save three.safetensors");
  ASSERT_EQ(skipped.status, 0) << skipped.out;
  const std::string two = safetensors_tensor_bytes(dir / "two.safetensors");
  ASSERT_FALSE(two.empty());
  EXPECT_TRUE(two == safetensors_tensor_bytes(dir / "three.safetensors"))
      << "weights after a skipped step differ from those before it";
  // And a step that did not overflow does change them.
  ASSERT_EQ(run_binary(c.world, bin, "--steps 3 --save three_applied.safetensors").status, 0);
  EXPECT_FALSE(two == safetensors_tensor_bytes(dir / "three_applied.safetensors"));
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
