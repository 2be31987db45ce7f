// Binary: the generated program's interface. --print-schedule, launch errors
// (wrong rank count, different binaries on one job, started alone), weights
// saved and loaded with Hugging Face names, bad inputs, the measured trace
// and the memory and allocation report.
#include <fstream>
#include <regex>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

// One binary per configuration, built once per test process.
std::filesystem::path binary(const std::string& name, const E2eConfig& c) {
  return shared_binary(e2e_dir("binary_" + name), c.spec());
}

E2eConfig two_ranks() {
  return E2eConfig{};
}

TEST(Binary, PrintScheduleIsWhatFsdpgenSchedulePrints) {
  auto bin = binary("default", two_ranks());
  CmdResult printed = run_command(bin.string() + " --print-schedule");
  ASSERT_EQ(printed.status, 0) << printed.out;
  CmdResult want =
      run(fmt::format("schedule {} --gpu cpu", (bin.parent_path() / "e2e.fsdp").string()));
  ASSERT_EQ(want.status, 0) << want.out;
  EXPECT_EQ(printed.out, want.out);
}

TEST(Binary, WrongRankCountStopsWithBothNumbersAndTheCommand) {
  auto bin = binary("default", two_ranks());
  CmdResult r = run_binary(3, bin, "--steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("generated for world 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("launched on 3 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mpirun -n 2"), std::string::npos) << r.out;
}

TEST(Binary, DifferentBinariesInOneJobFailOnEveryRank) {
  auto a = binary("default", two_ranks());
  E2eConfig other = two_ranks();
  other.backward = "post";  // another schedule, same world
  auto b = binary("post", other);
  allow_mpi_as_root();
  CmdResult r = run_command(
      fmt::format("timeout 120 mpirun --oversubscribe -n 1 {} --steps 1 : -n 1 {} --steps 1",
                  a.string(), b.string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, 124) << "timed out: the ranks hung";
  for (int rank : {0, 1})
    EXPECT_NE(r.out.find(fmt::format("rank {}: error: ranks run different programs", rank)),
              std::string::npos)
        << r.out;
}

TEST(Binary, StartedAloneItRelaunchesUnderMpirun) {
  auto bin = binary("default", two_ranks());
  allow_mpi_as_root();
  CmdResult r = run_command(
      fmt::format("cd {} && timeout 120 {} --steps 2", bin.parent_path().string(), bin.string()));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("re-launching as: mpirun -n 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("launched by mpirun"), std::string::npos) << r.out;
  CmdResult no =
      run_command(fmt::format("FSDPGEN_NO_RELAUNCH=1 timeout 60 {} --steps 2", bin.string()));
  EXPECT_EQ(no.status, 2) << no.out;
  EXPECT_NE(no.out.find("run:\n  mpirun -n 2"), std::string::npos) << no.out;
}

// The JSON header of a safetensors file.
nlohmann::json safetensors_header(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string json(n, ' ');
  in.read(json.data(), static_cast<std::streamsize>(n));
  return nlohmann::json::parse(json);
}

TEST(Binary, SavedWeightsLoadBackAndGiveTheSameLosses) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  // Initial weights out and in again: the same run, bit for bit.
  ASSERT_EQ(run_binary(2, bin, "--steps 0 --save w0.safetensors").status, 0);
  ASSERT_EQ(run_binary(2, bin, "--steps 3 --metrics plain.jsonl").status, 0);
  ASSERT_EQ(
      run_binary(2, bin, "--steps 3 --init-from w0.safetensors --metrics loaded.jsonl").status, 0);
  EXPECT_EQ(read_losses(dir / "plain.jsonl"), read_losses(dir / "loaded.jsonl"));

  nlohmann::json h = safetensors_header(dir / "w0.safetensors");
  ASSERT_TRUE(h.contains("transformer.h.0.attn.c_attn.weight"));
  EXPECT_EQ(h["transformer.h.0.attn.c_attn.weight"]["shape"], nlohmann::json::array({32, 96}));
  EXPECT_EQ(h["transformer.h.0.attn.c_attn.weight"]["dtype"], "F32");
  EXPECT_EQ(h["__metadata__"]["format"], "pt");

  // Trained weights, loaded by another strategy and world: the same loss.
  CmdResult saved = run_binary(2, bin, "--steps 3 --save w3.safetensors");
  ASSERT_EQ(saved.status, 0) << saved.out;
  E2eConfig one;
  one.sharding = "no_shard";
  one.world = 1;
  one.micro_batch = 4;  // the same global batch as 2 ranks of 2
  auto single = binary("single", one);
  ASSERT_EQ(run_binary(1, single,
                       fmt::format("--steps 1 --init-from {} --metrics m.jsonl",
                                   (dir / "w3.safetensors").string()))
                .status,
            0);
  ASSERT_EQ(run_binary(2, bin, "--steps 1 --init-from w3.safetensors --metrics m3.jsonl").status,
            0);
  auto a = read_losses(single.parent_path() / "m.jsonl"), b = read_losses(dir / "m3.jsonl");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NEAR(a[0], b[0], 1e-5 * a[0]);
}

TEST(Binary, BadInputsGiveLocatedErrorsOnEveryRankWithoutHanging) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  CmdResult missing = run_binary(2, bin, "--data /nonexistent/input.txt");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent/input.txt"), std::string::npos) << missing.out;

  std::ofstream(dir / "garbage.safetensors") << "this is not a safetensors file at all";
  CmdResult garbage = run_binary(2, bin, "--init-from garbage.safetensors");
  EXPECT_EQ(garbage.status, 1) << garbage.out;
  EXPECT_NE(garbage.out.find("garbage.safetensors"), std::string::npos) << garbage.out;

  E2eConfig wide;  // another model: its tensors have other shapes
  wide.units = "group 3 blocks";
  wide.optimizer = "sgd(lr = 0.1)";
  std::string spec = wide.spec();
  spec.replace(spec.find("width = 32"), 10, "width = 64");
  auto other_dir = e2e_dir("binary_wide");
  auto other = build_binary(other_dir, spec);
  ASSERT_EQ(run_binary(2, other, "--steps 0 --save wide.safetensors").status, 0);
  CmdResult shape =
      run_binary(2, bin, fmt::format("--init-from {}", (other_dir / "wide.safetensors").string()));
  EXPECT_EQ(shape.status, 1) << shape.out;
  EXPECT_NE(shape.out.find("transformer.wte.weight has shape [64, 64], the model needs [64, 32]"),
            std::string::npos)
      << shape.out;

  EXPECT_EQ(run_command(bin.string() + " --steps abc").status, 2);
  EXPECT_EQ(run_command(bin.string() + " --steps 3 --trace-step 3").status, 2);
  EXPECT_EQ(run_command(bin.string() + " --no-such-flag").status, 2);
}

// llm.c's token file: 256 int32 header (magic, version 1, count), uint16 tokens.
void write_tokens(const std::filesystem::path& p, int magic, int count) {
  std::ofstream out(p, std::ios::binary);
  int32_t header[256] = {magic, 1, count};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  for (int i = 0; i < count; ++i) {
    uint16_t t = static_cast<uint16_t>((i * 7 + i / 5) % 64);
    out.write(reinterpret_cast<const char*>(&t), 2);
  }
}

TEST(Binary, TrainsOnTextAndTokenFiles) {
  E2eConfig bytes = two_ranks();
  std::string spec = bytes.spec();
  spec.replace(spec.find("vocab = 64"), 10, "vocab = 256");  // byte-level text needs 256
  auto text_bin = shared_binary(e2e_dir("binary_bytes"), spec);
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(text_bin.parent_path() / "input.txt") << text;
  CmdResult t = run_binary(2, text_bin, "--steps 3 --data input.txt");
  EXPECT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("data: text input.txt"), std::string::npos) << t.out;

  auto bin = binary("default", two_ranks());
  write_tokens(bin.parent_path() / "train.bin", 20240520, 5000);
  CmdResult ok = run_binary(2, bin, "--steps 3 --data train.bin");
  EXPECT_EQ(ok.status, 0) << ok.out;
  write_tokens(bin.parent_path() / "bad.bin", 12345, 5000);
  CmdResult bad = run_binary(2, bin, "--steps 3 --data bad.bin");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("bad.bin"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("magic"), std::string::npos) << bad.out;
}

TEST(Binary, TraceHasEveryOpOfEveryRankLikeThePredictedTrace) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  CmdResult r = run_binary(2, bin, "--steps 3 --trace trace.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("communication hidden behind compute"), std::string::npos) << r.out;
  expect_trace_like_predicted(dir, "cpu", 2);
}

}  // namespace
}  // namespace fsdpgen::test
