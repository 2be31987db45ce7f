// `fsdpgen merge`: a checkpoint's shards as one safetensors file, the same
// file --save writes at that step, from any world that wrote it.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

CmdResult merge(const fs::path& dir, const std::string& args) {
  return run_command(fmt::format("cd {} && {} merge {}", dir.string(), FSDPGEN_BIN, args));
}

// Trains `c` for its steps with a checkpoint at the end and --save; the merged
// checkpoint must equal the saved file byte for byte (header included).
void expect_merge_equals_save(const std::string& name, const E2eConfig& c) {
  const fs::path dir = e2e_dir(name);
  fs::remove_all(dir / "ckpt");
  const fs::path bin = shared_binary(dir, c.spec());
  CmdResult r = run_binary(c.world, bin,
                           fmt::format("--checkpoint-every {} --save saved.safetensors", c.steps));
  ASSERT_EQ(r.status, 0) << r.out;
  CmdResult m = merge(dir, "ckpt -o merged.safetensors");
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_NE(m.out.find(fmt::format("step {}", c.steps)), std::string::npos) << m.out;
  const std::string saved = file_bytes(dir / "saved.safetensors");
  ASSERT_GT(saved.size(), 1000u);
  EXPECT_TRUE(saved == file_bytes(dir / "merged.safetensors"))
      << "merged checkpoint differs from --save's file";
  EXPECT_FALSE(fs::exists(dir / "merged.safetensors.partial"));
}

TEST(Merge, EqualsTheSavedWeightsOfAShardedRun) {
  E2eConfig c;  // full_shard over 2 ranks, fp32
  c.steps = 2;
  expect_merge_equals_save("merge_full_shard", c);
}

TEST(Merge, EqualsTheSavedWeightsOfAHybridBf16Run) {
  E2eConfig c;
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.param = "bf16";
  c.steps = 2;
  expect_merge_equals_save("merge_hybrid_bf16", c);
}

// llama's Hugging Face names (model.layers.N.self_attn.q_proj.weight, ...).
TEST(Merge, EqualsTheSavedWeightsOfALlamaRun) {
  E2eConfig c;
  c.family = "llama";
  c.tied = false;
  c.steps = 2;
  expect_merge_equals_save("merge_llama", c);
}

// --max-shard-size: a model directory as transformers' save_pretrained
// writes one (shards in tensor order, their index, config.json), which
// --init-from reads back to exactly the weights of the single-file merge:
// the same run's losses from either. Merged again, it replaces the model
// directory there.
TEST(Merge, ShardsIntoAModelDirectoryThatLoadsBackExactly) {
  E2eConfig c;
  c.family = "llama";
  c.tied = false;
  c.steps = 2;
  expect_merge_equals_save("merge_llama_sharded", c);
  const fs::path dir = e2e_dir("merge_llama_sharded");
  fs::remove_all(dir / "hf");
  CmdResult m = merge(dir, "ckpt -o hf --max-shard-size 20kB");
  ASSERT_EQ(m.status, 0) << m.out;
  const nlohmann::json index =
      nlohmann::json::parse(file_bytes(dir / "hf" / "model.safetensors.index.json"));
  std::set<std::string> files;
  int64_t tensors = 0;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    files.insert(file.get<std::string>());
    ++tensors;
  }
  EXPECT_EQ(tensors, 30) << "every tensor once: 3 blocks of 9, embedding, norm, head";
  EXPECT_GE(files.size(), 4u);
  EXPECT_NE(m.out.find(fmt::format("({} weight files, config.json", files.size())),
            std::string::npos)
      << m.out;
  for (const std::string& f : files)
    EXPECT_LE(fs::file_size(dir / "hf" / f), 20000u + 4096u) << f;  // data within the limit
  EXPECT_EQ(index.at("metadata").at("total_size"),
            safetensors_tensor_bytes(dir / "merged.safetensors").size())
      << "the tensors' bytes";
  EXPECT_TRUE(fs::exists(dir / "hf" / "config.json"));
  const fs::path bin = dir / "train";
  for (const char* from : {"merged.safetensors", "hf"})
    ASSERT_EQ(run_binary(c.world, bin,
                         fmt::format("--init-from {} --metrics from_{}.jsonl", from,
                                     fs::path(from).stem().string()))
                  .status,
              0)
        << from;
  EXPECT_EQ(read_losses(dir / "from_merged.jsonl"), read_losses(dir / "from_hf.jsonl"));
  EXPECT_EQ(read_losses(dir / "from_hf.jsonl").size(), 2u);
  const std::string index_text = file_bytes(dir / "hf" / "model.safetensors.index.json");
  CmdResult again = merge(dir, "ckpt -o hf");  // the default 5GB: one file
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_FALSE(fs::exists(dir / "hf" / "model.safetensors.index.json"));
  EXPECT_TRUE(file_bytes(dir / "hf" / "model.safetensors") ==
              file_bytes(dir / "merged.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "hf.partial"));
  EXPECT_FALSE(index_text.empty());
}

// A directory with ckpt/step_00000001 of a one-step run of the default config.
fs::path one_step_checkpoint(const std::string& name) {
  E2eConfig c;
  c.steps = 1;
  const fs::path dir = e2e_dir(name);
  fs::remove_all(dir / "ckpt");
  const fs::path bin = shared_binary(dir, c.spec());
  EXPECT_EQ(run_binary(c.world, bin, "--checkpoint-every 1").status, 0);
  return dir;
}

TEST(Merge, Bf16HalvesTheFileAndBadInputIsAnError) {
  const fs::path dir = one_step_checkpoint("merge_bad_input");
  ASSERT_EQ(merge(dir, "ckpt -o f32.safetensors").status, 0);
  CmdResult bf16 = merge(dir, "ckpt/step_00000001 -o bf16.safetensors --dtype bf16");
  ASSERT_EQ(bf16.status, 0) << bf16.out;
  const auto f32_data = safetensors_tensor_bytes(dir / "f32.safetensors").size();
  EXPECT_EQ(safetensors_tensor_bytes(dir / "bf16.safetensors").size() * 2, f32_data);

  CmdResult missing = merge(dir, "no_such_dir -o x.safetensors");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find("no_such_dir: no such checkpoint"), std::string::npos) << missing.out;

  // A corrupt shard: the checksum names the file, and no output is left.
  fs::copy(dir / "ckpt", dir / "corrupt",
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const fs::path shard = dir / "corrupt/step_00000001/shard_00001.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char was = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(~was));
  }
  CmdResult corrupt = merge(dir, "corrupt -o c.safetensors");
  EXPECT_EQ(corrupt.status, 1) << corrupt.out;
  EXPECT_NE(corrupt.out.find("shard_00001.bin"), std::string::npos) << corrupt.out;
  EXPECT_NE(corrupt.out.find("checksum"), std::string::npos) << corrupt.out;
  EXPECT_FALSE(fs::exists(dir / "c.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "c.safetensors.partial"));

  CmdResult bad_dtype = merge(dir, "ckpt -o x.safetensors --dtype fp8");
  EXPECT_EQ(bad_dtype.status, 2) << bad_dtype.out;
  EXPECT_NE(bad_dtype.out.find("unknown dtype 'fp8': fp32, bf16 or fp16"), std::string::npos)
      << bad_dtype.out;
}

// merge run from another directory than the run's: the model directory gets
// the config.json of the spec the manifest names (written relative to the
// run's directory, and found from there), with bos and eos null for a
// vocabulary of 64 (GPT-2's 50256 is no id of it); --spec names a spec.
TEST(Merge, FromAnotherDirectoryTheModelDirectoryGetsItsConfig) {
  const fs::path dir = one_step_checkpoint("merge_elsewhere");
  const fs::path elsewhere = e2e_dir("merge_elsewhere_cwd");
  for (const char* out : {"hf", "hf_spec"})
    fs::remove_all(elsewhere / out);
  CmdResult m = merge(elsewhere, fmt::format("{} -o hf", (dir / "ckpt").string()));
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_NE(m.out.find("(1 weight file, config.json (bos none, eos none)"), std::string::npos)
      << m.out;
  ASSERT_TRUE(fs::exists(elsewhere / "hf" / "config.json")) << m.out;
  const nlohmann::json config = nlohmann::json::parse(file_bytes(elsewhere / "hf/config.json"));
  EXPECT_EQ(config.at("vocab_size"), 64);
  EXPECT_EQ(config.at("n_embd"), 32);
  EXPECT_TRUE(config.at("bos_token_id").is_null()) << config.dump();
  EXPECT_TRUE(config.at("eos_token_id").is_null()) << config.dump();
  CmdResult named = merge(elsewhere, fmt::format("{} -o hf_spec --spec {}", (dir / "ckpt").string(),
                                                 (dir / "e2e.fsdp").string()));
  ASSERT_EQ(named.status, 0) << named.out;
  EXPECT_EQ(file_bytes(elsewhere / "hf_spec/config.json"),
            file_bytes(elsewhere / "hf/config.json"));
}

// A copy of dir's checkpoint in `name`/ckpt whose manifest's spec is `spec`,
// and no spec file beside it; returns the copy's directory.
fs::path checkpoint_copy(const fs::path& dir, const std::string& name, const std::string& spec) {
  const fs::path copy = e2e_dir(name);
  fs::remove_all(copy);
  fs::create_directories(copy);
  fs::copy(dir / "ckpt", copy / "ckpt", fs::copy_options::recursive);
  const fs::path manifest = copy / "ckpt/step_00000001/manifest.json";
  nlohmann::json j = nlohmann::json::parse(file_bytes(manifest));
  j["spec"] = spec;
  std::ofstream(manifest, std::ios::trunc) << j.dump(1);
  return copy;
}

// The hostile spec files a manifest may name, and a spec that cannot be found
// or is another model's: each is an error naming the manifest's field (or
// --spec) and the problem, within seconds, before anything is written (no
// half-made model directory, no .partial). timeout(1) turns a regression
// into a failure, not a hung suite.
TEST(Merge, AModelDirectorysSpecIsARegularFileOfThisModel) {
  const fs::path dir = one_step_checkpoint("merge_hostile_spec");
  const fs::path fifo = checkpoint_copy(dir, "merge_spec_fifo", "e2e.fsdp");
  ASSERT_EQ(::mkfifo((fifo / "e2e.fsdp").c_str(), 0644), 0);
  const fs::path big = checkpoint_copy(dir, "merge_spec_big", "e2e.fsdp");
  std::ofstream(big / "e2e.fsdp").close();
  fs::resize_file(big / "e2e.fsdp", int64_t{17} << 20);  // sparse
  const fs::path other = checkpoint_copy(dir, "merge_spec_other", "e2e.fsdp");
  std::string wide = file_bytes(dir / "e2e.fsdp");
  wide.replace(wide.find("width = 32"), 10, "width = 64");
  std::ofstream(other / "e2e.fsdp") << wide;
  struct Case {
    fs::path copy;
    std::string extra;
    std::vector<std::string> said;
  };
  const std::string manifest = "ckpt/step_00000001/manifest.json: \"spec\" names ";
  const std::vector<Case> cases = {
      {fifo, "", {manifest + "e2e.fsdp", "e2e.fsdp: not a regular file (a FIFO)", "--spec FILE"}},
      {checkpoint_copy(dir, "merge_spec_zero", "/dev/zero"),
       "",
       {manifest + "/dev/zero", "/dev/zero: not a regular file (a character device)"}},
      {big, "", {"e2e.fsdp: 17825792 bytes, more than the 16777216"}},
      {checkpoint_copy(dir, "merge_spec_missing", "specs/gone.fsdp"),
       "",
       {manifest + "specs/gone.fsdp, which is not at", "name the spec with --spec FILE"}},
      {other, "", {"e2e.fsdp is not the spec of this checkpoint (model 'e2e'): its tensor"}},
      {checkpoint_copy(dir, "merge_spec_flag", "e2e.fsdp"),
       "--spec /dev/zero",
       {"--spec /dev/zero: /dev/zero: not a regular file (a character device)"}},
  };
  for (const Case& c : cases) {
    const fs::path out = c.copy / "hf";
    CmdResult bounded = run_command(fmt::format("cd {} && timeout 60 {} merge ckpt -o hf {}",
                                                c.copy.string(), FSDPGEN_BIN, c.extra));
    EXPECT_EQ(bounded.status, 1) << c.copy << "\n" << bounded.out;
    for (const std::string& s : c.said)
      EXPECT_NE(bounded.out.find(s), std::string::npos) << c.copy << ": " << s << "\n"
                                                        << bounded.out;
    EXPECT_FALSE(fs::exists(out)) << out;
    EXPECT_FALSE(fs::exists(c.copy / "hf.partial")) << c.copy;
  }
  // A spec only a model directory needs: --spec (and --max-shard-size) with one file is refused.
  for (const char* flag : {"--spec e2e.fsdp", "--max-shard-size 5GB"}) {
    CmdResult one_file = merge(dir, fmt::format("ckpt -o one.safetensors {}", flag));
    EXPECT_EQ(one_file.status, 1) << one_file.out;
    EXPECT_NE(one_file.out.find(fmt::format("{}: -o one.safetensors names one .safetensors file, "
                                            "which has no config.json and no shards",
                                            flag)),
              std::string::npos)
        << one_file.out;
  }
}

// Tensor names a safetensors file cannot hold (empty, __metadata__, twice)
// are the manifest's errors, named there, not the safetensors writer's.
TEST(Merge, TensorNamesAreCheckedInTheManifest) {
  const fs::path dir = one_step_checkpoint("merge_bad_names");
  for (auto [edit, said] :
       {std::pair<std::function<void(nlohmann::json&)>, std::string>{
            [](nlohmann::json& j) { j["units"][1]["tensors"][0]["name"] = ""; },
            "unit 1 tensor 0: \"name\" \"\" is empty"},
        {[](nlohmann::json& j) {
           j["units"][1]["tensors"][1]["name"] = j["units"][1]["tensors"][0]["name"];
         },
         "unit 1 tensor 1: \"name\""},
        {[](nlohmann::json& j) { j["units"][0]["tensors"][0]["name"] = "__metadata__"; },
         "unit 0 tensor 0: \"name\" \"__metadata__\" is reserved"}}) {
    const fs::path copy = checkpoint_copy(dir, "merge_bad_name", "e2e.fsdp");
    const fs::path manifest = copy / "ckpt/step_00000001/manifest.json";
    nlohmann::json j = nlohmann::json::parse(file_bytes(manifest));
    edit(j);
    std::ofstream(manifest, std::ios::trunc) << j.dump(1);
    CmdResult m = merge(copy, "ckpt -o x.safetensors");
    EXPECT_EQ(m.status, 1) << m.out;
    EXPECT_NE(m.out.find("ckpt/step_00000001/manifest.json: unit"), std::string::npos) << m.out;
    EXPECT_NE(m.out.find(said), std::string::npos) << m.out;
    if (said.ends_with("\"name\"")) {
      EXPECT_NE(m.out.find("is repeated (unit 1 tensor 0 has it)"), std::string::npos) << m.out;
    }
    EXPECT_EQ(m.out.find("safetensors_plan"), std::string::npos) << m.out;
    EXPECT_FALSE(fs::exists(copy / "x.safetensors"));
  }
}

// Decodes IEEE half precision (written here, apart from runtime/dtype.h).
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1 : 1;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// --dtype takes the spec's spellings and safetensors' and PyTorch's, in any
// case; fp16 holds every weight to within half an fp16 step of its fp32 value.
TEST(Merge, DtypesTakeEverySpellingAndFp16IsTheWeightsRounded) {
  const fs::path dir = one_step_checkpoint("merge_dtypes");
  ASSERT_EQ(merge(dir, "ckpt -o default.safetensors").status, 0);
  for (const char* word :
       {"fp32", "F32", "float32", "bf16", "BFloat16", "fp16", "f16", "FLOAT16"}) {
    CmdResult m = merge(dir, fmt::format("ckpt -o {}.safetensors --dtype {}", word, word));
    ASSERT_EQ(m.status, 0) << word << "\n" << m.out;
  }
  const std::string f32 = file_bytes(dir / "default.safetensors");
  for (const char* word : {"fp32", "F32", "float32"})
    EXPECT_TRUE(file_bytes(dir / fmt::format("{}.safetensors", word)) == f32) << word;
  EXPECT_TRUE(file_bytes(dir / "BFloat16.safetensors") == file_bytes(dir / "bf16.safetensors"));
  const std::string f16 = file_bytes(dir / "fp16.safetensors");
  EXPECT_TRUE(file_bytes(dir / "f16.safetensors") == f16);
  EXPECT_TRUE(file_bytes(dir / "FLOAT16.safetensors") == f16);
  EXPECT_NE(f16.find("\"dtype\":\"F16\""), std::string::npos);

  const std::string wide = safetensors_tensor_bytes(dir / "default.safetensors"),
                    half = safetensors_tensor_bytes(dir / "fp16.safetensors");
  ASSERT_EQ(half.size() * 2, wide.size());
  ASSERT_GT(half.size(), 1000u);
  for (size_t i = 0; i < half.size() / 2; ++i) {
    float w;
    uint16_t h;
    std::memcpy(&w, wide.data() + 4 * i, 4);
    std::memcpy(&h, half.data() + 2 * i, 2);
    // Round to nearest: within half a step, 2^-11 relative, 2^-25 absolute below 2^-14.
    const double bound = std::max(std::fabs(w) * 0x1p-11, 0x1p-25);
    ASSERT_LE(std::fabs(half_value(h) - w), bound) << "element " << i << ": " << w;
  }
}

}  // namespace
}  // namespace fsdpgen::test
