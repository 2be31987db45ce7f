// E2e: helpers for tests that generate, build and run training binaries:
// a small gpt2 spec with every parallel knob settable, building it with
// fsdpgen, running it under mpirun (or alone for one rank), and reading the
// per-step metrics it writes.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/Command.h"
#include "tests/common/Files.h"

namespace fsdpgen::test {

// A small model (3 blocks, width 32, vocab 64, context 16): whole runs take
// well under a second, and every strategy has several units to schedule.
// Its vocabulary is stored padded to 128 rows (the default pad_vocab_to).
// family llama: the same sizes with 4 query heads on 2 key/value heads and a
// SwiGLU MLP of 88.
struct E2eConfig {
  std::string family = "gpt2";
  int vocab = 64;
  int pad_vocab_to = 0;  // 0: left to the default
  std::string sharding = "full_shard";
  int world = 2;
  int shard_group = 0;  // hybrid only; 0: leave to the default
  int micro_batch = 2;
  int micro_batches = 1;
  std::string reduce = "every";
  std::string param = "fp32";
  std::string reduce_dtype = "fp32";
  bool forward_prefetch = true;
  std::string backward = "pre";
  int max_inflight = 2;
  std::string recompute = "none";
  std::string offload = "none";
  bool offload_activations = false;  // recompute = block's saved inputs wait on the host
  std::string units = "each block";
  bool tied = true;
  bool qkv_bias = false;   // llama only: Qwen2's biases on q, k and v
  bool qwen3 = false;      // llama only: Qwen3's qk_norm, head_dim 16 (width 32 / 4 heads is 8)
  int sliding_window = 0;  // llama only: Mistral's window (0: none; the context is 16)
  bool olmo2 = false;      // llama only: OLMo 2's block_norms = post, qk_norm = across_heads
  bool gemma = false;      // llama only: Gemma's embedding scale, (1 + weight) norms, GeGLU
  // With gemma: Gemma 3's block (sandwich norms, each head's qk_norm, head_dim 16), layers 0
  // and 1 local (a window of 5, rotary base 100) and 2 global, and Gemma 2's caps and query
  // scalar (attention 2, logits 1.5, 24).
  bool gemma_sandwich = false;
  std::string optimizer = "adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)";
  int steps = 4;
  std::string clip = "1.0";  // a global norm, or none
  std::string train_extra;   // more lines of the train section (e.g. validation)
  std::string layers;        // a layers section's lines (custom layers), or none

  std::string spec() const {
    return fmt::format(
        "model e2e {{\n  family = {}\n  vocab = {}\n  context = 16\n  width = 32\n{}"
        "  layers = 3\n  tie_embeddings = {}\n{}}}\n{}"
        "units {{\n  {}\n}}\n"
        "parallel {{\n  world = {}\n  sharding = {}\n{}"
        "  precision {{ param = {}  reduce = {}  master = fp32 }}\n"
        "  prefetch {{ forward = {}  backward = {}  max_inflight = {} }}\n"
        "  recompute = {}\n  {}\n"
        "  accumulate {{ micro_batches = {}  reduce = {} }}\n}}\n"
        "train {{\n  optimizer = {}\n  lr_schedule = cosine(warmup = 1, min = 1e-3)\n"
        "  micro_batch = {}\n  steps = {}\n  clip = {}\n  seed = 1337\n"
        "  data = synthetic(seed = 7)\n  log_every = 1\n{}}}\n",
        family, vocab,
        family == "llama" ? "  heads = 4\n  kv_heads = 2\n  ffn_hidden = 88\n" : "  heads = 2\n",
        tied,
        (pad_vocab_to ? fmt::format("  pad_vocab_to = {}\n", pad_vocab_to) : "") +
            (qkv_bias ? "  qkv_bias = true\n" : "") +
            (qwen3 ? "  qk_norm = true\n  head_dim = 16\n" : "") +
            (sliding_window ? fmt::format("  sliding_window = {}\n", sliding_window) : "") +
            (olmo2 ? "  qk_norm = across_heads\n  block_norms = post\n" : "") +
            (gemma ? "  scale_embedding = true\n  norm_plus_one = true\n  activation = gelu_tanh\n"
                   : "") +
            (gemma_sandwich
                 ? "  block_norms = sandwich\n  qk_norm = true\n  head_dim = 16\n"
                   "  sliding_window = 5\n  global_every = 3\n  rope_local_theta = 100\n"
                   "  attention_softcap = 2\n  logit_softcap = 1.5\n  query_pre_attn_scalar = 24\n"
                 : ""),
        layers.empty() ? "" : fmt::format("layers {{\n{}}}\n", layers), units, world, sharding,
        shard_group ? fmt::format("  shard_group = {}\n", shard_group) : "", param, reduce_dtype,
        forward_prefetch, backward, max_inflight, recompute,
        offload_activations ? fmt::format("offload {{ params = {}  activations = cpu }}", offload)
                            : fmt::format("offload = {}", offload),
        micro_batches, reduce, optimizer, micro_batch, steps, clip, train_extra);
  }

  std::string name() const {
    std::string n = fmt::format("{}_w{}{}_mb{}x{}_{}_{}_fwd{}_{}_{}", sharding, world,
                                shard_group ? fmt::format("s{}", shard_group) : "", micro_batches,
                                micro_batch, reduce, param, forward_prefetch ? "on" : "off",
                                backward, recompute == "block" ? "recompute" : "norecompute");
    if (reduce_dtype != "fp32") n += "_reduce_" + reduce_dtype;
    if (offload != "none") n += "_offload";
    if (offload_activations) n += "_offload_acts";
    if (!tied) n += "_untied";
    if (units != "each block") {
      n += "_units_";
      for (char ch : units)  // a name per policy, explicit lists by their hash
        n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      if (n.size() > 160)
        n = n.substr(0, 120) + fmt::format("{:08x}", std::hash<std::string>{}(units)&0xffffffffu);
    }
    if (optimizer.rfind("sgd", 0) == 0) n += "_sgd";
    if (clip != "1.0") n += "_clip_" + clip;
    if (vocab != 64) n += fmt::format("_vocab{}", vocab);
    if (pad_vocab_to) n += fmt::format("_pad{}", pad_vocab_to);
    if (family != "gpt2") n += "_" + family;
    if (qkv_bias) n += "_qkv_bias";
    if (qwen3) n += "_qwen3";
    if (sliding_window) n += fmt::format("_window{}", sliding_window);
    if (olmo2) n += "_olmo2";
    if (gemma) n += "_gemma";
    if (gemma_sandwich) n += "_sandwich";
    if (!layers.empty())
      n += fmt::format("_layers{:08x}", std::hash<std::string>{}(layers)&0xffffffffu);
    if (!train_extra.empty())
      n += fmt::format("_train{:08x}", std::hash<std::string>{}(train_extra)&0xffffffffu);
    return n;
  }
};

// A layers section (E2eConfig::layers) importing an example layer
// (examples/layers/HEADER) with one module line, e.g.
// "mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)".
inline std::string example_layers(const std::string& header, const std::string& module) {
  return fmt::format("  import = \"{}/examples/layers/{}\"\n  {}\n", FSDPGEN_SOURCE_DIR, header,
                     module);
}

// Skips a test of custom layers, saying why, where the layer reader
// (fsdpgen-layers) was not built.
#define FSDPGEN_SKIP_WITHOUT_LAYER_READER()                                                \
  if (std::string(FSDPGEN_LAYER_READER).empty())                                           \
  GTEST_SKIP() << "the layer reader (fsdpgen-layers) is not built here: Clang 19 was not " \
                  "found (bash tools/setup.sh deps installs it)"

inline void PrintTo(const E2eConfig& c, std::ostream* os) {
  *os << c.name();
}

inline std::filesystem::path e2e_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::path(FSDPGEN_E2E_WORK) / name;
  std::filesystem::create_directories(d);
  return d;
}

// Root may run Open MPI only when told; tests on CI run as root.
inline void allow_mpi_as_root() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
}

// A whole file's bytes (empty when it is missing).
// Writes the spec and builds dir/train for target (cpu or cuda); fails the
// test on error.
inline std::filesystem::path build_binary(const std::filesystem::path& dir, const std::string& spec,
                                          const std::string& target = "cpu",
                                          const std::string& flags = "") {
  std::ofstream(dir / "e2e.fsdp") << spec;
  CmdResult r = run_command(fmt::format("cd {} && {} e2e.fsdp -o train --target {} {}",
                                        dir.string(), FSDPGEN_BIN, target, flags));
  EXPECT_EQ(r.status, 0) << r.out;
  return dir / "train";
}

// Runs f() holding dir/lock: test processes that CTest runs in parallel
// share work directories.
template <class F>
auto with_dir_lock(const std::filesystem::path& dir, F f) {
  struct lock {
    int fd;
    explicit lock(const std::filesystem::path& d)
        : fd(::open((d / "lock").c_str(), O_CREAT | O_RDWR, 0644)) {
      flock(fd, LOCK_EX);
    }
    ~lock() {
      flock(fd, LOCK_UN);
      ::close(fd);
    }
  } held(dir);
  return f();
}

// FNV-1a 64 over the bytes of each file in turn, then its size (a missing
// file counts as empty).
inline uint64_t fnv1a64_of_files(const std::vector<std::filesystem::path>& files) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const char* bytes, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<unsigned char>(bytes[i])) * 0x100000001b3ull;
  };
  for (const std::filesystem::path& f : files) {
    const std::string bytes = file_bytes(f);
    const uint64_t size = bytes.size();
    mix(bytes.data(), bytes.size());
    mix(reinterpret_cast<const char*>(&size), sizeof size);
  }
  return h;
}

// What a generated binary is made of besides its spec: fsdpgen (which embeds
// the templates) and the runtime libraries it links, the CUDA one where it is
// built (paths from tests/CMakeLists.txt).
inline std::vector<std::filesystem::path> build_inputs() {
  std::vector<std::filesystem::path> files = {FSDPGEN_BIN, FSDPGEN_RUNTIME_LIB, FSDPGEN_FILES_LIB,
                                              FSDPGEN_GENERATE_LIB, FSDPGEN_SUGGEST_LIB};
  if (std::strlen(FSDPGEN_CUDA_LIB) > 0) files.emplace_back(FSDPGEN_CUDA_LIB);
  return files;
}

// The key of this build, hashed once per test process (some 80 MB, a fraction
// of a second): caches of binaries and runs made by another build of the
// compiler or the runtime do not match it.
inline const std::string& build_key() {
  static const std::string key = fmt::format("{:016x}", fnv1a64_of_files(build_inputs()));
  return key;
}

// Builds dir/train once for this spec text and this build, shared by test
// processes (a changed spec, fsdpgen or runtime library rebuilds).
inline std::filesystem::path shared_binary(const std::filesystem::path& dir,
                                           const std::string& spec) {
  with_dir_lock(dir, [&] {
    if (std::filesystem::exists(dir / "train") && file_bytes(dir / "e2e.fsdp") == spec &&
        file_bytes(dir / "build_key") == build_key())
      return;
    std::filesystem::remove(dir / "build_key");
    std::filesystem::remove(dir / "train");
    build_binary(dir, spec);
    if (std::filesystem::exists(dir / "train")) std::ofstream(dir / "build_key") << build_key();
  });
  return dir / "train";
}

// How to launch `world` ranks of a binary; one rank runs alone.
inline std::string launch(int world, const std::filesystem::path& binary) {
  if (world == 1) return binary.string();
  return fmt::format("mpirun -n {} --oversubscribe --bind-to none {}", world, binary.string());
}

inline CmdResult run_binary(int world, const std::filesystem::path& binary,
                            const std::string& args) {
  allow_mpi_as_root();
  return run_command(fmt::format("cd {} && timeout 300 {} {}", binary.parent_path().string(),
                                 launch(world, binary), args));
}

// Each step's line of --metrics.
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The losses of each step, from --metrics.
inline std::vector<double> read_losses(const std::filesystem::path& metrics) {
  std::vector<double> losses;
  for (const nlohmann::json& m : read_metrics(metrics))
    losses.push_back(m.at("loss").get<double>());
  return losses;
}

// A checkpoint's files but its manifest (which records the step), by name:
// the shards' weights and optimizer state, to compare two checkpoints' state.
inline std::map<std::string, std::string> checkpoint_shard_files(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != "manifest.json")
      out[e.path().filename().string()] = file_bytes(e.path());
  return out;
}

// A safetensors file's tensor data: the bytes after its header (whose
// metadata names the step); empty when the file is missing or short.
inline std::string safetensors_tensor_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string all = s.str();
  uint64_t header = 0;
  if (all.size() < 8) return "";
  std::memcpy(&header, all.data(), 8);
  return all.size() - 8 < header ? "" : all.substr(8 + header);
}

// An llm.c token file: a 256-int32 header (magic, version, count) and the
// tokens: GPT-2's format (20240520, version 1, uint16) or Llama 3's
// (20240801, version 7, uint32).
enum class token_format { gpt2, llama3 };
inline void write_token_file(const std::filesystem::path& p, const std::vector<int32_t>& tokens,
                             token_format f = token_format::gpt2) {
  const bool wide = f == token_format::llama3;
  int32_t header[256] = {wide ? 20240801 : 20240520, wide ? 7 : 1,
                         static_cast<int32_t>(tokens.size())};
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  for (int32_t t : tokens) {
    if (wide) {
      out.write(reinterpret_cast<const char*>(&t), 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
}

// n token ids below vocab from a seeded generator.
inline std::vector<int32_t> random_token_ids(int64_t n, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int32_t& t : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    t = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return out;
}

// Runs c's binary `bin` writing --metrics to `file` beside it; returns each
// step's metrics (empty after a failure); fsdpgen's code must allocate
// nothing in a step.
inline std::vector<nlohmann::json> run_metrics(const E2eConfig& c, const std::filesystem::path& bin,
                                               const std::string& file,
                                               const std::string& extra = "") {
  CmdResult r = run_binary(c.world, bin, fmt::format("--metrics {} {}", file, extra));
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return {};
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << r.out;
  return read_metrics(bin.parent_path() / file);
}

// Builds and trains; returns the per-step losses (empty after a failure).
inline std::vector<double> train_losses(const std::string& name, const E2eConfig& c,
                                        const std::string& extra = "") {
  std::filesystem::path dir = e2e_dir(name);
  std::filesystem::path bin = build_binary(dir, c.spec());
  CmdResult r = run_binary(c.world, bin, "--metrics metrics.jsonl " + extra);
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return {};
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << r.out;
  return read_losses(dir / "metrics.jsonl");
}

// Built into dir/fail.so, for LD_PRELOAD: open() of a path containing
// $FSDPGEN_TEST_FAIL_OPEN, open() without O_CREAT of one containing
// $FSDPGEN_TEST_FAIL_REOPEN (a rank opening the file rank 0 created), and
// rename() to one containing $FSDPGEN_TEST_FAIL_RENAME (or of a .partial
// directory to one ending in $FSDPGEN_TEST_FAIL_RENAME_END) fail, so that a
// chosen save fails even for root, who may write anywhere; open() of a path
// containing $FSDPGEN_TEST_HANG_OPEN never returns (a stuck file system), and
// one containing $FSDPGEN_TEST_SLOW_OPEN returns after a second (a slow one);
// open() or fopen() of one containing $FSDPGEN_TEST_TOUCH_OPEN first mallocs
// and touches $FSDPGEN_TEST_TOUCH_BYTES bytes, never freed (as a library's
// buffer taken at that moment would be).
inline std::filesystem::path failing_io_library(const std::filesystem::path& dir) {
  std::ofstream(dir / "fail.c") << R"(#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int matches(const char* var, const char* path) {
  const char* m = getenv(var);
  return m && *m && path && strstr(path, m);
}

static void* volatile touched; /* kept: the bytes stay the process's */

static void touch_if_told(const char* path) {
  const char* bytes = getenv("FSDPGEN_TEST_TOUCH_BYTES");
  if (!matches("FSDPGEN_TEST_TOUCH_OPEN", path) || !bytes) return;
  size_t n = strtoull(bytes, NULL, 10);
  touched = malloc(n);
  if (touched) memset(touched, 1, n);
}

typedef int (*open_fn)(const char*, int, ...);
typedef FILE* (*fopen_fn)(const char*, const char*);

FILE* fopen(const char* path, const char* mode) {
  touch_if_told(path);
  return ((fopen_fn)dlsym(RTLD_NEXT, "fopen"))(path, mode);
}

FILE* fopen64(const char* path, const char* mode) {
  touch_if_told(path);
  return ((fopen_fn)dlsym(RTLD_NEXT, "fopen64"))(path, mode);
}

static int open_unless_told(const char* real_name, const char* path, int flags, int mode) {
  touch_if_told(path);
  if (matches("FSDPGEN_TEST_HANG_OPEN", path))
    for (;;) sleep(1);
  if (matches("FSDPGEN_TEST_SLOW_OPEN", path)) sleep(1);
  if (matches("FSDPGEN_TEST_FAIL_OPEN", path) ||
      (matches("FSDPGEN_TEST_FAIL_REOPEN", path) && !(flags & O_CREAT))) {
    errno = EIO;
    return -1;
  }
  return ((open_fn)dlsym(RTLD_NEXT, real_name))(path, flags, mode);
}

/* The mode is read whatever the flags: harmless where the caller passed none. */
int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  return open_unless_told("open", path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  return open_unless_told("open64", path, flags, mode);
}

static int ends_with(const char* var, const char* path) {
  const char* m = getenv(var);
  size_t n = m ? strlen(m) : 0, p = path ? strlen(path) : 0;
  return n && p >= n && strcmp(path + p - n, m) == 0;
}

int rename(const char* from, const char* to) {
  if (matches("FSDPGEN_TEST_FAIL_RENAME", to) ||
      (ends_with("FSDPGEN_TEST_FAIL_RENAME_END", to) && strstr(from, ".partial"))) {
    errno = EXDEV;
    return -1;
  }
  return ((int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename"))(from, to);
}
)";
  CmdResult r = run_command(fmt::format("cc -shared -fPIC -O1 -U_FORTIFY_SOURCE -o {} {} -ldl",
                                        (dir / "fail.so").string(), (dir / "fail.c").string()));
  EXPECT_EQ(r.status, 0) << r.out;
  return dir / "fail.so";
}

// fp16 loss scaling around an injected overflow in 0-based step k of a
// binary's `steps` (args: more flags, e.g. --comm): step k alone is skipped,
// the loss scale is 2^16 up to it and 2^15 after, losses and the other steps'
// norms are finite and the last loss is below the first; and the weights
// after k + 1 steps, the last skipped, are bit for bit those after k steps
// (while a step that did not overflow changes them).
inline void expect_overflow_skipped_and_recovered(const std::filesystem::path& bin, int world,
                                                  size_t steps, size_t k,
                                                  const std::string& args = "") {
  const std::filesystem::path dir = bin.parent_path();
  CmdResult r = run_binary(
      world, bin,
      fmt::format("{} --steps {} --metrics m.jsonl --inject-overflow {}", args, steps, k));
  ASSERT_EQ(r.status, 0) << r.out;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("1 step skipped for non-finite gradients (loss scale now 32768)"),
            std::string::npos)
      << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), steps);
  for (size_t s = 0; s < m.size(); ++s) {
    EXPECT_EQ(m[s].at("skipped").get<bool>(), s == k) << "step " << s + 1;
    EXPECT_EQ(m[s].at("loss_scale").get<double>(), s <= k ? 65536.0 : 32768.0) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(m[s].at("loss").get<double>())) << "step " << s + 1;
    if (s != k) {
      EXPECT_TRUE(m[s].at("grad_norm").is_number()) << "step " << s + 1;
    }
  }
  EXPECT_LT(m.back().at("loss").get<double>(), m.front().at("loss").get<double>())
      << "training goes on after the skipped step";

  // The weights after steps k and k + 1 of one (k + 1)-step run (one
  // learning-rate schedule: --steps sets its length), from checkpoints
  // written after every step and merged.
  auto weights_after = [&](const std::string& flags, const std::string& name) {
    std::filesystem::remove_all(dir / name);
    CmdResult s = run_binary(
        world, bin,
        fmt::format("{} --steps {} {} --checkpoint-every 1 --checkpoint-keep 2 --checkpoint-dir {}",
                    args, k + 1, flags, name));
    EXPECT_EQ(s.status, 0) << s.out;
    auto merged = [&](size_t step) {
      const std::filesystem::path out = dir / fmt::format("{}_{}.safetensors", name, step);
      CmdResult m = run(fmt::format(
          "merge {} -o {}", (dir / name / fmt::format("step_{:08}", step)).string(), out.string()));
      EXPECT_EQ(m.status, 0) << m.out;
      return safetensors_tensor_bytes(out);
    };
    return std::pair{merged(k), merged(k + 1)};
  };
  const auto [before, skipped] = weights_after(fmt::format("--inject-overflow {}", k), "skipped");
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE(before == skipped) << "weights after a skipped step differ from those before it";
  const auto [same_before, applied] = weights_after("", "applied");
  EXPECT_TRUE(same_before == before) << "the steps before the overflow are the same";
  EXPECT_FALSE(applied == same_before) << "a step that did not overflow changes the weights";
}

// The arenas `fsdpgen plan` prints for dir/e2e.fsdp on hardware `gpu` (host:
// 0 without offload).
struct planned_arena_bytes {
  int64_t device = -1, host = 0;
};
inline planned_arena_bytes planned_arenas(const std::filesystem::path& dir,
                                          const std::string& gpu) {
  CmdResult plan = run(fmt::format("plan {} --gpu {}", (dir / "e2e.fsdp").string(), gpu));
  EXPECT_EQ(plan.status, 0) << plan.out;
  std::smatch device, host;
  planned_arena_bytes out;
  if (std::regex_search(plan.out, device, std::regex(R"(device arena [0-9.]+ MiB \((\d+) B\))")))
    out.device = std::stoll(device[1]);
  else
    ADD_FAILURE() << "no device arena in: " << plan.out;
  if (std::regex_search(plan.out, host,
                        std::regex(R"(host arena \([a-z ,]+\): [0-9.]+ MiB \((\d+) B\))")))
    out.host = std::stoll(host[1]);
  return out;
}

// The host pages an arena of `bytes` occupies with its guard (runtime/arena.h
// kArenaGuardBytes), as mincore counts them; 0 for no arena.
inline int64_t arena_in_pages(int64_t bytes) {
  constexpr int64_t kGuardBytes = 4096;
  const int64_t page = sysconf(_SC_PAGESIZE);
  return bytes <= 0 ? 0 : (bytes + kGuardBytes + page - 1) / page * page;
}

// dir/trace.json (written by a binary's --trace) has, for each of `world`
// ranks, exactly the ops of dir/e2e.fsdp's predicted trace on hardware `gpu`,
// by name and planned fields (the args the planner's op_json writes, which
// the runtime rebuilds from the program's kOps rows), each with a duration.
inline void expect_trace_like_predicted(const std::filesystem::path& dir, const std::string& gpu,
                                        int world) {
  CmdResult predicted =
      run(fmt::format("schedule {} --gpu {} --format trace -o {}", (dir / "e2e.fsdp").string(), gpu,
                      (dir / "predicted.json").string()));
  ASSERT_EQ(predicted.status, 0) << predicted.out;
  auto names = [](const nlohmann::json& j, int pid) {
    std::multiset<std::string> s;
    for (const auto& e : j["traceEvents"])
      if (e["ph"] == "X" && e["pid"] == pid)
        s.insert(e["name"].get<std::string>() + " " + e["args"].dump());
    return s;
  };
  nlohmann::json measured = nlohmann::json::parse(std::ifstream(dir / "trace.json"));
  nlohmann::json planned = nlohmann::json::parse(std::ifstream(dir / "predicted.json"));
  EXPECT_FALSE(names(planned, 0).empty());
  for (int rank = 0; rank < world; ++rank)
    EXPECT_EQ(names(measured, rank), names(planned, 0)) << "rank " << rank;
  for (const auto& e : measured["traceEvents"])
    if (e["ph"] == "X") {
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
}

}  // namespace fsdpgen::test
