// SampleTest: samples during training (sample_every) and `fsdpgen sample`
// afterwards. A byte-level model (GPT-2, and Llama) trained 6 steps over 2 ranks (full_shard,
// so every tensor is split between them) prints 2 samples after steps 3 and
// 6 and puts them on those steps' --metrics lines; `fsdpgen sample` on the
// checkpoint of step 6 (its spec found from the manifest) and on the --save
// file with --spec, with the seed the run used, prints the same text: the
// weights the run gathered to rank 0 are the checkpoint's, whole.
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

const char* kSpec = R"(model sample_tiny {
  family = gpt2
  vocab = 256
  context = 64
  width = 64
  heads = 4
  layers = 2
  tie_embeddings = true
}
units { each block }
parallel { world = 2  sharding = full_shard }
train {
  optimizer = adamw(lr = 3e-3)
  micro_batch = 4
  steps = 6
  seed = 1337
  data = text("corpus.txt")
  checkpoint(every = 6, dir = "ckpt", keep = 1)
  sample_every = 3
  sample_tokens = 24
}
)";

CmdResult sample(const fs::path& dir, const std::string& args) {
  return run_command(fmt::format("cd {} && {} sample {}", dir.string(), FSDPGEN_BIN, args));
}

// The text of sample 1 in `fsdpgen sample`'s output, less the prompt (a newline).
std::string first_sample(const std::string& out) {
  const std::string head = "--- sample 1/1 (seed 1349)\n\n";
  const size_t at = out.find(head);
  if (at == std::string::npos) return "(no sample in: " + out + ")";
  const size_t begin = at + head.size();
  return out.substr(begin, out.rfind('\n') - begin);
}

// GPT-2 as kSpec states it, Llama (grouped-query attention, rotary
// positions, an untied head), Qwen3 (Llama's with each head's q and k
// normed, heads of 32 where width / heads is 16, tied), OLMo 2 (norms after
// attention and the MLP, q and k normed across heads, tied here), Gemma
// (the embedding scaled, (1 + weight) norms, GeGLU, tied) or Llama with Gemma
// 2's soft-capped scores and logits and q . k scaled by 24^-0.5 (heads of 16),
// caps low enough to change what is drawn, or Gemma 3 (Gemma's with
// sandwich norms, each head's q/k norms, local layers attending their last
// 4 positions with a rotary base of their own, and global layers' rotary
// frequencies divided by 4: linear scaling, which the checkpoint's
// config.json must carry for the generations to match).
std::string spec_of(const std::string& family) {
  std::string spec = kSpec;
  if (family == "llama")
    spec.replace(spec.find("family = gpt2"), 13, "family = llama\n  kv_heads = 2")
        .replace(spec.find("tie_embeddings = true"), 21, "tie_embeddings = false");
  if (family == "qwen3")
    spec.replace(spec.find("family = gpt2"), 13,
                 "family = llama\n  kv_heads = 2\n  qk_norm = true\n  head_dim = 32");
  if (family == "olmo2")
    spec.replace(spec.find("family = gpt2"), 13,
                 "family = llama\n  kv_heads = 2\n  qk_norm = across_heads\n  block_norms = post");
  if (family == "gemma")
    spec.replace(spec.find("family = gpt2"), 13,
                 "family = llama\n  kv_heads = 1\n  scale_embedding = true\n  norm_plus_one = "
                 "true\n  activation = gelu_tanh");
  if (family == "gemma2_caps")
    spec.replace(spec.find("family = gpt2"), 13,
                 "family = llama\n  kv_heads = 2\n  attention_softcap = 0.5\n  logit_softcap = "
                 "1.5\n  query_pre_attn_scalar = 24");
  if (family == "gemma3")
    spec.replace(spec.find("family = gpt2"), 13,
                 "family = llama\n  kv_heads = 1\n  scale_embedding = true\n  norm_plus_one = "
                 "true\n  activation = gelu_tanh\n  block_norms = sandwich\n  qk_norm = true\n  "
                 "sliding_window = 4\n  global_every = 2\n  rope_local_theta = 100\n  "
                 "rope_scaling = linear(factor = 4)");
  return spec;
}

class SampleFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(SampleFamily, TrainingSamplesAreTheCheckpointsGenerations) {
  const fs::path dir = e2e_dir(std::string("sample_training_") + GetParam());
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / "corpus.txt") << corpus;
  fs::remove_all(dir / "ckpt");
  const fs::path bin = build_binary(dir, spec_of(GetParam()));
  const CmdResult r = run_binary(2, bin, "--metrics m.jsonl --save out.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("samples: every 3 steps, 2 of 24 tokens from a newline"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 6 | samples from a newline:\n--- sample 1/2\n"), std::string::npos)
      << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 6u);
  for (size_t s = 0; s < m.size(); ++s)
    EXPECT_EQ(m[s].contains("samples"), s == 2 || s == 5) << m[s].dump();
  ASSERT_TRUE(m[5].contains("samples"));
  const std::vector<std::string> texts = m[5].at("samples");
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_NE(texts[0], texts[1]) << "two seeds, two samples";
  // Gemma 3's first sample holds a NUL byte (token 0 of this byte-level
  // model): the run's and fsdpgen sample's printing must keep it and what
  // follows (both once stopped there).
  if (std::string(GetParam()) == "gemma3") {
    EXPECT_NE(texts[0].find('\0'), std::string::npos) << "no NUL in the gemma3 sample now";
  }

  // Sample k after step s is drawn with seed 1337 + 2 s + k: 1349 for the first after step 6.
  const std::string args = "--prompt-ids 10 --tokens 24 --seed 1349";
  const CmdResult from_checkpoint = sample(dir, "ckpt " + args);
  ASSERT_EQ(from_checkpoint.status, 0) << from_checkpoint.out;
  EXPECT_NE(from_checkpoint.out.find("(step 6, spec"), std::string::npos) << from_checkpoint.out;
  EXPECT_EQ(first_sample(from_checkpoint.out), texts[0]);
  const CmdResult from_file = sample(dir, "out.safetensors --spec e2e.fsdp " + args);
  ASSERT_EQ(from_file.status, 0) << from_file.out;
  EXPECT_EQ(first_sample(from_file.out), texts[0]);
  // Byte-level: the prompt's text is its bytes, no tokenizer needed.
  const CmdResult text_prompt = sample(dir, "ckpt --prompt 'the quick' --tokens 8 --temperature 0");
  ASSERT_EQ(text_prompt.status, 0) << text_prompt.out;
  EXPECT_NE(text_prompt.out.find("--- sample 1/1 (seed 1337)\nthe quick"), std::string::npos)
      << text_prompt.out;
}

// Only Gemma 2's and 3's config.json states the soft-caps and
// query_pre_attn_scalar: for a llama without their sandwich norms --save DIR
// refuses before training and merge -o DIR refuses, naming the keys; --save
// FILE.safetensors and merge -o FILE.safetensors write the weights.
TEST(Sample, CapsWithoutGemmasClassAreNotWrittenIntoAModelDirectory) {
  const fs::path dir = e2e_dir("sample_gemma2_caps_save");
  std::ofstream(dir / "corpus.txt") << std::string(2000, 'a');
  fs::remove_all(dir / "ckpt");
  fs::remove_all(dir / "model");
  const fs::path bin = build_binary(dir, spec_of("gemma2_caps"));
  const std::string why =
      "cannot write a model directory for this model: its config.json cannot state "
      "attention_softcap, logit_softcap, query_pre_attn_scalar: only Gemma 2's and 3's classes "
      "have them";
  const CmdResult save = run_binary(2, bin, "--steps 1 --save model");
  EXPECT_EQ(save.status, 1) << save.out;
  EXPECT_NE(save.out.find("error: --save model: " + why), std::string::npos) << save.out;
  EXPECT_EQ(save.out.find("step 1/1"), std::string::npos) << "trained first:\n" << save.out;
  const CmdResult file = run_binary(2, bin, "--save out.safetensors");
  ASSERT_EQ(file.status, 0) << file.out;
  const CmdResult merge =
      run_command(fmt::format("cd {} && {} merge ckpt -o model", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(merge.status, 1) << merge.out;
  EXPECT_NE(merge.out.find("model: " + why), std::string::npos) << merge.out;
  EXPECT_FALSE(fs::exists(dir / "model"));
  const CmdResult merge_file = run_command(
      fmt::format("cd {} && {} merge ckpt -o merged.safetensors", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(merge_file.status, 0) << merge_file.out;
}

// A token set `fsdpgen prepare` made with a byte-level BPE: the samples start
// from its <|endoftext|> and are decoded by the tokenizer.json beside its
// manifest, in the run and in `fsdpgen sample` (whose --prompt the
// tokenizers library encodes). Needs the tools' venv (prepare, the prompt).
INSTANTIATE_TEST_SUITE_P(Families, SampleFamily,
                         ::testing::Values("gpt2", "llama", "qwen3", "olmo2", "gemma",
                                           "gemma2_caps", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Sample, ATokenSetsTokenizerDecodesAndEncodes) {
  const fs::path python = fs::path(FSDPGEN_BIN).parent_path() / "python" / "bin" / "python";
  if (!fs::exists(python))
    GTEST_SKIP() << "no tools venv at " << python << " (bash tools/setup.sh python)";
  const fs::path dir = e2e_dir("sample_token_set");
  std::string corpus;
  for (int i = 0; i < 300; ++i)
    corpus += "the river and the market of the city. ";
  std::ofstream(dir / "corpus.txt") << corpus;
  fs::remove_all(dir / "ts");
  fs::remove_all(dir / "ckpt");
  const std::string tokenizer =
      (fs::path(FSDPGEN_SOURCE_DIR) / "tests/runtime/decode_reference/gpt2/tokenizer.json")
          .string();
  const CmdResult prepared = run_command(fmt::format(
      "cd {} && {} prepare corpus.txt -o ts --tokenizer {}", dir.string(), FSDPGEN_BIN, tokenizer));
  ASSERT_EQ(prepared.status, 0) << prepared.out;
  std::string spec = kSpec;
  spec.replace(spec.find("vocab = 256"), 11, "vocab = 400");
  spec.replace(spec.find("text(\"corpus.txt\")"), 18, "tokens(\"ts/train_*.bin\")");
  const fs::path bin = build_binary(dir, spec);
  const CmdResult r = run_binary(2, bin, "--steps 3 --checkpoint-every 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("from <|endoftext|> (temperature 1), decoded by ts/tokenizer.json"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 3 | samples from <|endoftext|>:"), std::string::npos) << r.out;
  const CmdResult s = sample(dir, "ckpt --prompt 'the river' --tokens 4 --temperature 0");
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_NE(s.out.find("decoded by ts/tokenizer.json"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("--- sample 1/1 (seed 1337)\nthe river"), std::string::npos) << s.out;
  // A tokenizer.json whose decoder fsdpgen cannot run costs the samples
  // their text, not the run: they print as ids, and the banner says why.
  nlohmann::json tj = nlohmann::json::parse(file_bytes(dir / "ts" / "tokenizer.json"));
  tj["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  std::ofstream(dir / "ts" / "tokenizer.json") << tj.dump();
  const CmdResult ids = run_binary(2, bin, "--steps 1 --sample-every 1");
  ASSERT_EQ(ids.status, 0) << ids.out;
  EXPECT_NE(ids.out.find("printed as ids (ts/tokenizer.json: decoder type 'WordPiece' cannot run "
                         "here"),
            std::string::npos)
      << ids.out;
  EXPECT_NE(ids.out.find("step 1 | samples from <|endoftext|>:"), std::string::npos) << ids.out;
}

TEST(Sample, BadInputsAreNamed) {
  const fs::path dir = e2e_dir("sample_errors");
  std::ofstream(dir / "x.txt") << "not weights";
  const struct {
    std::string args, error;
  } cases[] = {
      {"missing", "missing: no such file or directory"},
      {"x.txt", "x.txt: not a .safetensors file, a checkpoint or a model directory"},
      {"--temperature -1 x.txt", "--temperature -1 is not a number >= 0"},
      {"--top-k -3 x.txt", "--top-k -3 is negative"},
      {"--tokens 0 x.txt", "--tokens 0 is below 1"},
      {"--prompt a --prompt-ids 1 x.txt", "--prompt and --prompt-ids: give one of them"},
      {fmt::format("{}/tests/runtime/generate_reference/gpt2 --prompt-ids 1,64",
                   FSDPGEN_SOURCE_DIR),
       "--prompt-ids 1,64: '64' is not a token id of the model (0 to 63)"},
      {fmt::format("{}/tests/runtime/generate_reference/gpt2", FSDPGEN_SOURCE_DIR),
       "no prompt, and no document-start token"},
      {fmt::format("{}/tests/runtime/generate_reference/gpt2 --prompt hello", FSDPGEN_SOURCE_DIR),
       "--prompt needs a tokenizer to encode it"},
      {fmt::format("{}/tests/runtime/generate_reference/gpt2 --spec x.fsdp --prompt-ids 1",
                   FSDPGEN_SOURCE_DIR),
       "--spec x.fsdp: "},
  };
  for (const auto& c : cases) {
    const CmdResult r = sample(dir, c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("fsdpgen: error: " + c.error), std::string::npos) << c.args << "\n"
                                                                           << r.out;
  }
}

}  // namespace
}  // namespace fsdpgen::test
