// Binary: the generated program's interface. --print-schedule, launch errors
// (wrong rank count, different binaries on one job, started alone), weights
// saved and loaded with Hugging Face names, --seed, a failed --save, bad
// inputs, learning text and token files, the measured trace and the memory
// and allocation report.
#include <cmath>
#include <fstream>
#include <map>
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
  const size_t said = r.out.find("error: ranks run different programs");
  EXPECT_NE(said, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("error:", said + 1), std::string::npos) << "said once\n" << r.out;
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

// The lines of --metrics without what is measured (the step's time and the
// memory the machine counted): step, loss, lr, grad_norm, skipped, loss scale.
std::vector<nlohmann::json> computed_metrics(const std::filesystem::path& metrics) {
  std::vector<nlohmann::json> lines = read_metrics(metrics);
  for (nlohmann::json& line : lines) {
    for (const char* measured :
         {"ms", "tokens_per_s", "host_resident_bytes", "arena_resident_bytes", "arena_growth_bytes",
          "set_up_beside_arena_bytes"})
      line.erase(measured);
  }
  return lines;
}

// --seed chooses the initial weights (the spec's seed when absent), and one
// seed gives the same run bit for bit.
TEST(Binary, SeedChoosesTheInitialWeightsAndRepeatsTheRun) {
  std::string spec = two_ranks().spec();
  spec.replace(spec.find("seed = 1337"), 11, "seed = 4242");  // not the usual default
  auto bin = shared_binary(e2e_dir("binary_seed"), spec);
  auto dir = bin.parent_path();
  auto initial_weights = [&](const std::string& seed) {
    CmdResult r =
        run_binary(2, bin, fmt::format("--steps 0 --seed {} --save w{}.safetensors", seed, seed));
    EXPECT_EQ(r.status, 0) << r.out;
    return safetensors_tensor_bytes(dir / fmt::format("w{}.safetensors", seed));
  };
  const std::string w4242 = initial_weights("4242"), w1337 = initial_weights("1337");
  ASSERT_FALSE(w4242.empty());
  EXPECT_EQ(w4242.size(), w1337.size());
  EXPECT_FALSE(w4242 == w1337) << "two seeds gave the same initial weights";

  // 3 steps: the metrics (all but the measured) and the trained weights.
  struct run_result {
    std::vector<nlohmann::json> metrics;
    std::string weights;
  };
  auto train = [&](const std::string& name, const std::string& flags) {
    CmdResult r = run_binary(
        2, bin,
        fmt::format("--steps 3 {} --metrics {}.jsonl --save {}.safetensors", flags, name, name));
    EXPECT_EQ(r.status, 0) << r.out;
    return run_result{computed_metrics(dir / (name + ".jsonl")),
                      safetensors_tensor_bytes(dir / (name + ".safetensors"))};
  };
  const run_result spec_seed = train("spec_seed", ""), seeded = train("seeded", "--seed 4242"),
                   again = train("again", "--seed 4242"), other = train("other", "--seed 1337");
  ASSERT_EQ(seeded.metrics.size(), 3u);
  EXPECT_EQ(seeded.metrics, again.metrics);
  EXPECT_TRUE(seeded.weights == again.weights) << "one seed, two different runs";
  EXPECT_EQ(spec_seed.metrics, seeded.metrics) << "without --seed, the spec's seed (4242)";
  EXPECT_TRUE(spec_seed.weights == seeded.weights);
  ASSERT_EQ(other.metrics.size(), 3u);
  EXPECT_NE(other.metrics[0]["loss"], seeded.metrics[0]["loss"]);
  EXPECT_FALSE(other.weights == seeded.weights);
}

// A --save that fails keeps the file it would replace byte for byte, exits 1
// and names the file: when keep.safetensors.partial cannot be created (a
// directory has its name), and when rank 1 cannot open it to write its
// shards after rank 0 created it (then the partial file is removed too).
TEST(Binary, AFailedSaveKeepsTheOldFile) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  const std::filesystem::path kept = dir / "keep.safetensors",
                              partial = dir / "keep.safetensors.partial";
  std::filesystem::remove_all(partial);
  ASSERT_EQ(run_binary(2, bin, "--steps 0 --save keep.safetensors").status, 0);
  const std::string old = file_bytes(kept);
  ASSERT_FALSE(old.empty());

  std::filesystem::create_directory(partial);
  CmdResult blocked = run_binary(2, bin, "--steps 2 --save keep.safetensors");
  EXPECT_EQ(blocked.status, 1) << blocked.out;
  EXPECT_NE(blocked.out.find("cannot create keep.safetensors.partial: Is a directory"),
            std::string::npos)
      << blocked.out;
  EXPECT_TRUE(file_bytes(kept) == old) << "the old file changed";
  std::filesystem::remove(partial);

  const std::filesystem::path lib = failing_io_library(dir);
  allow_mpi_as_root();
  CmdResult failed = run_command(fmt::format(
      "cd {} && FSDPGEN_TEST_FAIL_REOPEN=keep.safetensors.partial LD_PRELOAD={} timeout 300 {} "
      "--steps 2 --save keep.safetensors",
      dir.string(), lib.string(), launch(2, bin)));
  EXPECT_EQ(failed.status, 1) << failed.out;
  EXPECT_NE(failed.out.find("rank 1: error: cannot open keep.safetensors.partial: Input/output "
                            "error"),
            std::string::npos)
      << failed.out;
  EXPECT_TRUE(file_bytes(kept) == old) << "the old file changed";
  EXPECT_FALSE(std::filesystem::exists(partial));
}

// Every output is checked before the first step: an unwritable --save,
// --metrics, --trace or checkpoint directory stops every rank with exit 1
// (no MPI_Abort), names the flag and the path, trains nothing and leaves no
// other output behind; a checkpoint directory that does not exist yet is
// created.
TEST(Binary, UnwritableOutputsStopEveryRankBeforeTheFirstStep) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  std::filesystem::remove(dir / "early.jsonl");
  std::filesystem::remove(dir / "early.safetensors");
  auto expect_refused = [&](const std::string& flags, const std::string& message,
                            const std::vector<int>& ranks) {
    CmdResult r = run_binary(2, bin, "--steps 2 " + flags);
    EXPECT_EQ(r.status, 1) << r.out;
    // Every rank's error is said once, as one process would; rank 0's alone names it.
    const std::string said =
        ranks.size() == 2 ? "error: " : fmt::format("rank {}: error: ", ranks[0]);
    EXPECT_NE(r.out.find(said + message), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("step 1/2"), std::string::npos) << "trained first:\n" << r.out;
    EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
  };
  expect_refused("--save /nonexistent/x.safetensors --metrics early.jsonl",
                 "--save /nonexistent/x.safetensors: cannot write there: /nonexistent is not a "
                 "directory",
                 {0, 1});
  EXPECT_FALSE(std::filesystem::exists(dir / "early.jsonl"));
  expect_refused("--trace /nonexistent/t.json --save early.safetensors",
                 "--trace /nonexistent/t.json: cannot write there", {0});
  EXPECT_FALSE(std::filesystem::exists(dir / "early.safetensors"));
  expect_refused("--metrics /nonexistent/m.jsonl", "--metrics /nonexistent/m.jsonl", {0});
  // A file's name (any other is a model directory's: HfDirectoryTest).
  std::filesystem::create_directories(dir / "dir.safetensors");
  expect_refused("--save dir.safetensors",
                 "--save dir.safetensors: cannot write there: it is a directory", {0, 1});
  expect_refused("--checkpoint-every 1 --checkpoint-dir /proc/nope",
                 "--checkpoint-dir /proc/nope: cannot create the directory /proc/nope", {0, 1});

  std::filesystem::remove_all(dir / "fresh");
  CmdResult fresh = run_binary(2, bin, "--steps 1 --checkpoint-every 5 --checkpoint-dir fresh/ck");
  EXPECT_EQ(fresh.status, 0) << fresh.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "fresh" / "ck" / "step_00000001" / "manifest.json"))
      << fresh.out;
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
void write_tokens(const std::filesystem::path& p, int magic, const std::vector<uint16_t>& tokens) {
  std::ofstream out(p, std::ios::binary);
  int32_t header[256] = {magic, 1, static_cast<int32_t>(tokens.size())};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
}

// A deterministic stream over 64 ids: each token is the previous plus 7, or
// plus 8 at every fifth.
std::vector<uint16_t> stepping_tokens(int count) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < count; ++i)
    tokens.push_back(static_cast<uint16_t>((i * 7 + i / 5) % 64));
  return tokens;
}

// The entropy in nats of the symbols' frequencies: the loss of the best
// model that ignores the context.
template <class Symbols>
double unigram_entropy_nats(const Symbols& symbols) {
  std::map<int, double> counts;
  for (auto s : symbols)
    counts[static_cast<int>(s)] += 1;
  double h = 0;
  for (const auto& [symbol, n] : counts) {
    const double p = n / static_cast<double>(symbols.size());
    h -= p * std::log(p);
  }
  return h;
}

// What a run on the file `data` (read as `kind`: text or tokens) learned:
// its first and last losses, and the trained weights' loss (one step's,
// computed before its update) on `data` and on `shuffled`, the same symbols
// in another order.
struct learned {
  double first, last, on_data, on_shuffled;
};

learned train_and_score(const std::filesystem::path& bin, int steps, const std::string& kind,
                        const std::string& data, const std::string& shuffled) {
  CmdResult r = run_binary(2, bin,
                           fmt::format("--steps {} --data {} --metrics train.jsonl --save "
                                       "trained.safetensors",
                                       steps, data));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(fmt::format("data: {} {}:", kind, data)), std::string::npos) << r.out;
  const std::vector<double> losses = read_losses(bin.parent_path() / "train.jsonl");
  EXPECT_EQ(losses.size(), static_cast<size_t>(steps)) << r.out;
  if (losses.empty()) return {};
  auto score = [&](const std::string& file) {
    CmdResult s = run_binary(
        2, bin,
        fmt::format("--steps 1 --data {} --init-from trained.safetensors --metrics score.jsonl",
                    file));
    EXPECT_EQ(s.status, 0) << s.out;
    const std::vector<double> l = read_losses(bin.parent_path() / "score.jsonl");
    return l.size() == 1 ? l[0] : NAN;
  };
  return {losses.front(), losses.back(), score(data), score(shuffled)};
}

// Trained on a text (or token stream) with a fixed order, the model learns
// the order: its loss ends well below the symbols' unigram entropy (what a
// model of frequencies alone reaches), and the trained weights score the same
// symbols in another order above it. A loader that fed zeros, targets equal
// to the inputs or a reader that ignored the file would score both orders
// alike.
void expect_learned(const learned& l, double unigram_nats) {
  std::printf(
      "loss %.4f -> %.4f; trained weights: %.4f on the data, %.4f reordered; unigram "
      "entropy %.4f\n",
      l.first, l.last, l.on_data, l.on_shuffled, unigram_nats);
  EXPECT_LT(l.last, unigram_nats / 2);
  EXPECT_LT(l.on_data, unigram_nats / 2);
  EXPECT_GT(l.on_shuffled, unigram_nats);
}

// A spec of n steps (its learning-rate schedule spans them) and vocab.
std::string learning_spec(int steps, int vocab) {
  E2eConfig c = two_ranks();
  c.steps = steps;
  std::string spec = c.spec();
  spec.replace(spec.find("vocab = 64"), 10, fmt::format("vocab = {}", vocab));
  return spec;
}

constexpr int kLearnSteps = 200;

TEST(Binary, LearnsTheOrderOfATextFile) {
  auto bin = shared_binary(e2e_dir("binary_bytes"), learning_spec(kLearnSteps, 256));
  const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
  // Each word reversed: the same bytes, as often, in another order.
  const std::string reversed = "eht kciuq nworb xof spmuj revo eht yzal .god ";
  std::string text, other;
  for (int i = 0; i < 200; ++i)
    text += sentence, other += reversed;
  std::ofstream(bin.parent_path() / "input.txt") << text;
  std::ofstream(bin.parent_path() / "reversed.txt") << other;
  ASSERT_EQ(unigram_entropy_nats(text), unigram_entropy_nats(other));
  expect_learned(train_and_score(bin, kLearnSteps, "text", "input.txt", "reversed.txt"),
                 unigram_entropy_nats(text));
}

TEST(Binary, LearnsTheOrderOfATokenFileAndRefusesABadOne) {
  auto bin = shared_binary(e2e_dir("binary_tokens"), learning_spec(kLearnSteps, 64));
  const std::vector<uint16_t> tokens = stepping_tokens(5000);
  const std::vector<uint16_t> backwards(tokens.rbegin(), tokens.rend());
  write_tokens(bin.parent_path() / "train.bin", 20240520, tokens);
  write_tokens(bin.parent_path() / "backwards.bin", 20240520, backwards);
  expect_learned(train_and_score(bin, kLearnSteps, "tokens", "train.bin", "backwards.bin"),
                 unigram_entropy_nats(tokens));

  write_tokens(bin.parent_path() / "bad.bin", 12345, tokens);
  CmdResult bad = run_binary(2, bin, "--steps 3 --data bad.bin");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("bad.bin"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("magic"), std::string::npos) << bad.out;
}

// A spec's text("input.txt") is the file beside the spec (specs/input.txt
// for specs/s.fsdp), not one in the current directory. Missing, the build
// says so and the binary's error names the path it tried and why.
TEST(Binary, SpecDataIsFoundFromTheSpecsDirectory) {
  const std::filesystem::path dir = e2e_dir("binary_spec_data");
  std::filesystem::remove_all(dir / "specs");
  std::filesystem::create_directories(dir / "specs");
  std::string spec = learning_spec(4, 256);
  spec.replace(spec.find("synthetic(seed = 7)"), 19, "text(\"input.txt\")");
  std::ofstream(dir / "specs/s.fsdp") << spec;
  const std::string beside = "specs/input.txt";

  CmdResult build = run_command(
      fmt::format("cd {} && {} specs/s.fsdp -o train --target cpu", dir.string(), FSDPGEN_BIN));
  ASSERT_EQ(build.status, 0) << build.out;
  EXPECT_NE(build.out.find(fmt::format("note: the spec's data file {} does not exist yet", beside)),
            std::string::npos)
      << build.out;
  std::ofstream(dir / "input.txt") << "a file in the current directory is not the spec's\n";
  CmdResult missing = run_binary(2, dir / "train", "--steps 4");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find(beside + ": cannot open"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("found from that spec's directory as fsdpgen was given it"),
            std::string::npos)
      << missing.out;

  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / beside) << text;
  CmdResult ok = run_binary(2, dir / "train", "--steps 4");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find(beside), std::string::npos) << "the banner names the file read\n" << ok.out;
}

TEST(Binary, TraceHasEveryOpOfEveryRankLikeThePredictedTrace) {
  auto bin = binary("default", two_ranks());
  auto dir = bin.parent_path();
  CmdResult r = run_binary(2, bin, "--steps 3 --trace trace.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("communication hidden behind compute"), std::string::npos) << r.out;
  expect_trace_like_predicted(dir, "cpu", 2);
}

// Muon's ops (MUON_GATHER, MUON_NS, MUON_SCATTER) are traced too, with the
// planner's labels (a trace once read past the runtime's label table there).
TEST(Binary, TraceOfAMuonRunHasItsExchangesAndNewtonSchulz) {
  E2eConfig muon = two_ranks();
  muon.optimizer = "muon(lr = 0.02, adamw = adamw(lr = 1e-2))";
  auto bin = binary("muon_trace", muon);
  auto dir = bin.parent_path();
  CmdResult r = run_binary(2, bin, "--steps 2 --trace trace.json");
  ASSERT_EQ(r.status, 0) << r.out;
  expect_trace_like_predicted(dir, "cpu", 2);
  const std::string trace = file_bytes(dir / "trace.json");
  for (const char* label : {"\"MUON_GATHER\"", "\"MUON_NS\"", "\"MUON_SCATTER\""})
    EXPECT_NE(trace.find(label), std::string::npos) << label;
}

// A flag error names the flag and the form it expects, without CLI11's
// 300-digit range; an unknown flag gets the nearest valid one. Exit status 2.
TEST(Binary, FlagErrorsNameTheFlagTheExpectedFormAndTheNearestFlag) {
  auto bin = binary("default", two_ranks());
  auto flag_error = [&](const std::string& flags) {
    CmdResult r = run_command(bin.string() + " " + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.out;
    EXPECT_LT(r.out.size(), 300u) << "a short message: " << r.out;
    return r.out;
  };
  for (const char* flags : {"--steps=5x", "--steps -1", "--steps 1.5"}) {
    std::string out = flag_error(flags);
    EXPECT_NE(out.find("--steps"), std::string::npos) << out;
    EXPECT_NE(out.find("a whole number >= 0"), std::string::npos) << out;
  }
  std::string log_every = flag_error("--log-every 0");
  EXPECT_NE(log_every.find("--log-every"), std::string::npos) << log_every;
  EXPECT_NE(log_every.find("a whole number >= 1"), std::string::npos) << log_every;
  std::string scale = flag_error("--inject-grad-scale 0");
  EXPECT_NE(scale.find("a number > 0"), std::string::npos) << scale;

  std::string step = flag_error("--step 5");
  EXPECT_NE(step.find("--step"), std::string::npos) << step;
  EXPECT_NE(step.find("did you mean --steps?"), std::string::npos) << step;
  std::string every = flag_error("--checkpoint-evry=3");
  EXPECT_NE(every.find("did you mean --checkpoint-every?"), std::string::npos) << every;
  std::string far = flag_error("--no-such-flag");
  EXPECT_NE(far.find("--no-such-flag"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

// Text is bytes: a GPT-2-sized vocabulary (50,257) fed a text file trains on
// raw bytes, which fsdpgen refuses for a spec's text(...) and the binary for
// --data, each naming token files; text(..., allow_bytes = true) builds and
// --allow-bytes trains.
TEST(Binary, TextIntoATokenizersVocabularyIsRefusedUnlessAllowed) {
  E2eConfig c = two_ranks();
  c.vocab = 50257;
  const std::filesystem::path dir = e2e_dir("binary_text_into_bpe");
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += "notes taken as bytes, not as a tokenizer's tokens. ";
  std::ofstream(dir / "notes.txt") << text;

  std::string spec = c.spec();
  spec.replace(spec.find("synthetic(seed = 7)"), 19, "text(\"notes.txt\")");
  std::ofstream(dir / "text.fsdp") << spec;
  CmdResult refused = run_command(
      fmt::format("cd {} && {} text.fsdp -o text_train 2>&1", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find("error: text is read as bytes, token ids 0 to 255, but this model's "
                             "vocabulary has 50,257 tokens"),
            std::string::npos)
      << refused.out;
  EXPECT_NE(refused.out.find("allow_bytes = true"), std::string::npos) << refused.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "text_train"));
  spec.replace(spec.find("text(\"notes.txt\")"), 17, "text(\"notes.txt\", allow_bytes = true)");
  std::ofstream(dir / "text.fsdp") << spec;
  CmdResult check =
      run_command(fmt::format("{} check {}", FSDPGEN_BIN, (dir / "text.fsdp").string()));
  EXPECT_EQ(check.status, 0) << check.out;

  const std::filesystem::path bin = binary("vocab50257", c);
  CmdResult flag =
      run_binary(2, bin, fmt::format("--steps 1 --data {}", (dir / "notes.txt").string()));
  EXPECT_EQ(flag.status, 1) << flag.out;
  EXPECT_NE(flag.out.find("notes.txt: text is read as bytes, token ids 0 to 255, but this model's "
                          "vocabulary has 50,257 tokens"),
            std::string::npos)
      << flag.out;
  EXPECT_NE(flag.out.find("llm.c token files"), std::string::npos) << flag.out;
  EXPECT_NE(flag.out.find("--allow-bytes"), std::string::npos) << flag.out;
  CmdResult val =
      run_binary(2, bin, fmt::format("--steps 1 --val {}", (dir / "notes.txt").string()));
  EXPECT_EQ(val.status, 1) << val.out;
  EXPECT_NE(val.out.find("vocabulary has 50,257 tokens"), std::string::npos) << val.out;

  CmdResult allowed = run_binary(
      2, bin, fmt::format("--steps 1 --allow-bytes --data {}", (dir / "notes.txt").string()));
  EXPECT_EQ(allowed.status, 0) << allowed.out;
  EXPECT_NE(allowed.out.find("data: text " + (dir / "notes.txt").string()), std::string::npos)
      << allowed.out;
}

// A text file named .bin: the error says how .bin is read and how to pass text.
TEST(Binary, TextNamedBinSaysHowToPassText) {
  auto bin = binary("default", two_ranks());
  std::ofstream(bin.parent_path() / "text.bin") << "this is text, not llm.c tokens\n";
  CmdResult r = run_binary(2, bin, "--steps 1 --data text.bin");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("a .bin file is read as an llm.c token file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--data input.txt"), std::string::npos) << r.out;
}

// One rank and one step are singular; --trace-step says how many steps there are.
TEST(Binary, CountsOfOneAreSingularAndTraceStepSaysTheSteps) {
  auto bin = binary("default", two_ranks());
  allow_mpi_as_root();
  CmdResult alone = run_command(
      fmt::format("timeout 120 mpirun --oversubscribe -n 1 {} --steps 1", bin.string()));
  EXPECT_EQ(alone.status, 2) << alone.out;
  EXPECT_NE(alone.out.find("launched on 1 rank;"), std::string::npos) << alone.out;

  E2eConfig one;
  one.sharding = "no_shard";
  one.world = 1;
  one.micro_batch = 4;
  CmdResult r = run_binary(1, binary("single", one), "--steps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("  1 rank ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: 1 step in"), std::string::npos) << r.out;

  CmdResult trace = run_command(bin.string() + " --steps 3 --trace-step 3");
  EXPECT_EQ(trace.status, 2) << trace.out;
  EXPECT_NE(trace.out.find("--trace-step 3 is not below the number of steps: the run has 3 "
                           "steps, numbered from 0"),
            std::string::npos)
      << trace.out;
}

// --steps N: the lr schedule follows the run's N steps (the decay reaches min
// at step N, as torchtitan and llm.c do), also when resumed, and N shorter
// than the spec's warm-up clamps the warm-up to the run with a warning.
TEST(Binary, StepsFlagEndsTheLrScheduleAtTheRunsLastStep) {
  E2eConfig c = two_ranks();
  c.steps = 40;
  std::string spec = c.spec();
  const size_t warmup_at = spec.find("warmup = 1");
  ASSERT_NE(warmup_at, std::string::npos) << spec;
  spec.replace(warmup_at, 10, "warmup = 3");
  const auto bin = shared_binary(e2e_dir("binary_schedule"), spec);
  const auto dir = bin.parent_path();
  std::filesystem::remove_all(dir / "sched_ck");

  CmdResult r = run_binary(
      2, bin, "--steps 6 --metrics sched.jsonl --checkpoint-every 3 --checkpoint-dir sched_ck");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("lr: 3 warm-up steps to 0.01, then cosine down to 0.001 at step 6, the "
                       "last"),
            std::string::npos)
      << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "sched.jsonl");
  ASSERT_EQ(m.size(), 6u);
  // The schedule written out: lr * (k + 1) / 3 for k < 3, then cosine from
  // 1e-2 to 1e-3 over steps 3..5. --metrics prints %.9g: relative 1e-8.
  for (int k = 0; k < 6; ++k) {
    const double want =
        k < 3 ? 1e-2 * (k + 1) / 3 : 1e-3 + 0.5 * (1 + std::cos(M_PI * (k - 3) / 2.0)) * 9e-3;
    EXPECT_NEAR(m[k]["lr"].get<double>(), want, want * 1e-8) << "step " << k;
  }
  EXPECT_NEAR(m[5]["lr"].get<double>(), 1e-3, 1e-11) << "the last step is at min";

  // Resumed at step 3 of the same 6: the same learning rates, as printed.
  CmdResult resumed =
      run_binary(2, bin, "--resume sched_ck/step_00000003 --steps 6 --metrics resumed.jsonl");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  const std::vector<nlohmann::json> rest = read_metrics(dir / "resumed.jsonl");
  ASSERT_EQ(rest.size(), 3u);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_EQ(rest[k]["lr"], m[k + 3]["lr"]) << "step " << k + 3;

  // Shorter than the warm-up (a smoke test): warned once, the warm-up
  // clamped to the run's 2 steps, and it trains.
  CmdResult shorter = run_binary(2, bin, "--steps 2 --checkpoint-every 0 --metrics short.jsonl");
  ASSERT_EQ(shorter.status, 0) << shorter.out;
  const std::string warning =
      "warning: --steps 2: the run is shorter than the spec's warmup (3 steps); the warm-up is "
      "clamped to the run's 2 steps, reaching lr 0.01 at its last step";
  const size_t at = shorter.out.find(warning);
  EXPECT_NE(at, std::string::npos) << shorter.out;
  EXPECT_EQ(shorter.out.find(warning, at + 1), std::string::npos) << "once, not per rank";
  EXPECT_NE(shorter.out.find("lr: 2 warm-up steps (the spec's 3, clamped to the run) to 0.01, "
                             "the whole run"),
            std::string::npos)
      << shorter.out;
  const std::vector<nlohmann::json> short_run = read_metrics(dir / "short.jsonl");
  ASSERT_EQ(short_run.size(), 2u);
  EXPECT_NEAR(short_run[0]["lr"].get<double>(), 5e-3, 5e-3 * 1e-8);
  EXPECT_NEAR(short_run[1]["lr"].get<double>(), 1e-2, 1e-2 * 1e-8);
}

}  // namespace
}  // namespace fsdpgen::test
