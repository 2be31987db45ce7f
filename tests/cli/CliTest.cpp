// fsdpgen schedule, plan, emit and build from the command line: outputs,
// formats, overrides, targets, --sources, --time-passes and errors.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/CliHelpers.h"
#include "tests/common/Command.h"

namespace {

using fsdpgen::test::CmdResult;
using fsdpgen::test::file_bytes;
using fsdpgen::test::fresh_dir;
using fsdpgen::test::has;
using fsdpgen::test::run;
using fsdpgen::test::spec;

TEST(CliSchedule, TextListsEveryStream) {
  CmdResult r = run("schedule " + spec("tiny.fsdp"));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s :
       {"stream compute", "stream allgather", "stream reducescatter", "AG u1", "RS u4", "OPT u0"})
    EXPECT_TRUE(has(r, s)) << s << "\n" << r.out.substr(0, 2000);
}

// The text schedule says once, before its first op, what its labels mean
// ("F u1 s1 mb0"): the fields and each op kind it holds, and no kind it
// does not hold (tiny has no recompute); the JSON needs no legend.
TEST(CliSchedule, TextHasOneLegendOfItsLabels) {
  CmdResult r = run("schedule " + spec("tiny.fsdp") + " --gpu cpu");
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t legend = r.out.find("legend: ");
  ASSERT_NE(legend, std::string::npos) << r.out.substr(0, 2000);
  EXPECT_EQ(r.out.find("legend: ", legend + 1), std::string::npos) << "once";
  EXPECT_LT(legend, r.out.find("stream compute"));
  const std::string text = r.out.substr(legend, r.out.find("stream compute") - legend);
  for (const char* s :
       {"#N op N (deps: the ops it waits for)", "uN unit N (u0 the root)", "sN segment N",
        "mbN micro-batch N", "AG all-gather of a unit's parameter shards", "F forward",
        "B backward", "RS reduce-scatter of a unit's gradients", "FREE buffers return to the plan",
        "OPT optimizer step"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
  EXPECT_EQ(text.find("RECOMPUTE"), std::string::npos) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    EXPECT_LE(line.size(), 90u) << line;
  CmdResult json = run("schedule " + spec("tiny.fsdp") + " --gpu cpu --format json");
  ASSERT_EQ(json.status, 0) << json.out;
  EXPECT_EQ(json.out.find("legend"), std::string::npos);
}

TEST(CliSchedule, JsonAndTraceParse) {
  std::string dir = testing::TempDir();
  ASSERT_EQ(
      run("schedule " + spec("gpt2-124m.fsdp") + " --format json -o " + dir + "/s.json").status, 0);
  std::ifstream js(dir + "/s.json");
  nlohmann::json j = nlohmann::json::parse(js);
  EXPECT_EQ(j["world"], 8);
  EXPECT_EQ(j["units"].size(), 13u);
  EXPECT_GT(j["ops"].size(), 50u);
  ASSERT_EQ(run("schedule " + spec("tiny.fsdp") + " --format trace --gpu cpu -o " + dir + "/t.json")
                .status,
            0);
  std::ifstream ts(dir + "/t.json");
  nlohmann::json t = nlohmann::json::parse(ts);
  std::set<int> tids;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") tids.insert(e["tid"].get<int>());
  EXPECT_GE(tids.size(), 3u);  // compute, all-gather, reduce-scatter (and all-reduce)
}

TEST(CliSchedule, WorldOverrideIsChecked) {
  CmdResult r = run("schedule " + spec("gpt2-1.5b.fsdp") + " --world 12");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "must divide world (12)")) << r.out;
  r = run("schedule " + spec("tiny.fsdp") + " --world 0");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "--world 0: must be between 1")) << r.out;
  EXPECT_EQ(run("schedule " + spec("tiny.fsdp") + " --world 4").status, 0);
}

TEST(CliPlan, ReportsMemoryFitAndTime) {
  CmdResult r = run("plan " + spec("gpt-175b.fsdp") + " --world 512 --gpu a100-80g");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s :
       {"174601101312 parameters", "optimizer_state", "fits: yes", "MFU", "exposed", "tokens/s"})
    EXPECT_TRUE(has(r, s)) << s << "\n" << r.out;
}

TEST(CliPlan, SaysWhatWouldFit) {
  // GPT-2 1.5B without recompute on one 40 GB device does not fit; at the
  // spec's world, accumulation at the same global batch does (tune's rules:
  // no "more ranks" advice, no silent batch change).
  CmdResult r =
      run("plan " + spec("gpt2-1.5b.fsdp") + " --world 1 --micro-batch 64 --gpu a100-40g");
  EXPECT_EQ(r.status, 1)
      << r.out;  // world 1 with a shard group of 8: the spec's hybrid layout needs 8 ranks
  r = run("plan " + spec("gpt2-350m.fsdp") + " --micro-batch 64 --gpu a100-40g");
  ASSERT_EQ(r.status, 4) << r.out;  // does not fit
  EXPECT_TRUE(has(r, "fits: NO")) << r.out;
  EXPECT_TRUE(has(r, "changes that fit on 8 x a100-40g (tune's search)")) << r.out;
  EXPECT_TRUE(has(r, "micro_batch = 32, micro_batches = 2")) << r.out;
  EXPECT_FALSE(has(r, "world =")) << r.out;
  EXPECT_FALSE(has(r, "[global batch")) << r.out;
}

TEST(CliPlan, UnknownHardwareNamesTheChoices) {
  CmdResult r = run("plan " + spec("tiny.fsdp") + " --gpu a100");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "a100-40g")) << r.out;
}

// The CUDA target plans for --gpu and writes calls into runtime/cuda/: the
// CPU runtime's names, with the op's gpu_exec last; the CPU target writes the
// CPU runtime's. Both name their target in the header.
TEST(CliEmit, TargetsWriteTheirRuntimesCalls) {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/cli-emit";
  CmdResult cpu = run("emit " + spec("tiny.fsdp") + " --target cpu -o " + dir + "/cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.out;
  CmdResult gpu =
      run("emit " + spec("tiny.fsdp") + " --target cuda --gpu h200 -o " + dir + "/cuda");
  ASSERT_EQ(gpu.status, 0) << gpu.out;
  const std::string c = file_bytes(dir + "/cpu/train.cpp"), g = file_bytes(dir + "/cuda/train.cpp");
  EXPECT_NE(c.find("gpt2_block_forward<param_t>("), std::string::npos);
  EXPECT_EQ(c.find("cuda_"), std::string::npos);
  EXPECT_NE(c.find("train_main(kProgram"), std::string::npos);
  EXPECT_NE(g.find("gpt2_block_forward<param_t>(out, params, saved, kDims, g);"),
            std::string::npos);
  EXPECT_NE(g.find("const gpu_comm& comm = cuda_op_comm(c, stream_id::allgather"),
            std::string::npos);
  EXPECT_NE(g.find("comm_all_gather(comm, shard, params, 98816, g);"), std::string::npos);
  EXPECT_NE(g.find("cuda_train_main(kProgram"), std::string::npos);
  EXPECT_NE(g.find("--gpu h200"), std::string::npos);
}

// Offload on the CUDA target: the ops run on the host (norm, optimizer,
// cross-replica all-reduce of host shards) are listed in kHostOps and written
// in the CPU runtime's words on host memory; the copies to and from the host
// stay on the GPU.
TEST(CliEmit, CudaOffloadRunsTheOptimizerOnTheHost) {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/cli-emit-offload";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/offload.fsdp")
      << "model t { vocab = 256 context = 32 width = 64 heads = 4 layers = 2 }\n"
         "parallel { world = 4 sharding = hybrid_shard shard_group = 2 offload = cpu\n"
         "  precision { param = bf16 reduce = bf16 master = fp32 }\n"
         "  accumulate { micro_batches = 2 } }\n"
         "train { micro_batch = 2 }\n";
  for (const char* target : {"cuda", "cpu"}) {
    CmdResult r = run(fmt::format("emit {0}/offload.fsdp --target {1} -o {0}/{1}", dir, target));
    ASSERT_EQ(r.status, 0) << r.out;
  }
  const std::string g = file_bytes(dir + "/cuda/train.cpp"), c = file_bytes(dir + "/cpu/train.cpp");
  EXPECT_NE(g.find("constexpr int kHostOps[] = {"), std::string::npos);
  EXPECT_NE(g.find("    .host_ops = kHostOps,\n"), std::string::npos);
  EXPECT_NE(g.find("  std::byte* shard = host<std::byte>(c, "), std::string::npos);
  EXPECT_NE(g.find("  step_optimizer(c, 0, shard, master, state, grads);"), std::string::npos);
  EXPECT_NE(g.find("  std::byte* grads_u0 = host<std::byte>(c, "), std::string::npos);
  EXPECT_NE(g.find("  step_add_grad_norm(c, grads_u0, "), std::string::npos);
  EXPECT_NE(g.find("  MPI_Comm comm = op_comm(c, stream_id::allreduce, comm_group::shard);\n"
                   "  float* partial = &c.grad_norm_partial;\n"),
            std::string::npos);
  // The fp32 accumulator is reduced across replicas in bf16, on the host.
  EXPECT_NE(g.find("  MPI_Comm comm = op_comm(c, stream_id::allreduce, comm_group::replica);\n"
                   "  std::byte* shard = host<std::byte>(c, "),
            std::string::npos);
  EXPECT_NE(g.find("  tensor_narrow_in_place(shard, "), std::string::npos);
  EXPECT_NE(g.find("  comm_all_reduce(comm, shard, shard, "), std::string::npos);
  EXPECT_EQ(g.find("state, grads, g);"), std::string::npos);  // not the GPU overload
  EXPECT_EQ(g.find("cuda_norm_partial"), std::string::npos);
  // Host to device and device to host (widening bf16 into the fp32 host shard) on the GPU.
  EXPECT_NE(g.find("  std::byte* dst = dev<std::byte>(c, "), std::string::npos);
  EXPECT_NE(g.find("  cuda_copy(dst, src, "), std::string::npos);
  EXPECT_NE(g.find("  tensor_convert(shard, "), std::string::npos);
  EXPECT_EQ(c.find("kHostOps"), std::string::npos);
}

TEST(CliEmit, TargetErrors) {
  CmdResult bad = run("emit " + spec("tiny.fsdp") + " --target tpu -o /tmp/x");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_TRUE(has(bad, "--target")) << bad.out;
  CmdResult cpu_gpu = run("emit " + spec("tiny.fsdp") + " --target cuda --gpu cpu -o /tmp/x");
  EXPECT_EQ(cpu_gpu.status, 1) << cpu_gpu.out;
  EXPECT_TRUE(has(cpu_gpu, "--gpu cpu is not one")) << cpu_gpu.out;
}

// --time-passes: one line per compiler pass on stderr, in pipeline order,
// each with its wall time, up to the subcommand's last pass; none without the flag.
TEST(CliTimePasses, PrintsEachPassOnceWithItsTime) {
  const std::regex line(R"(pass (\w+) +(\d+\.\d\d) ms)");
  for (const char* command : {"plan", "schedule", "emit"}) {
    const std::string dir = fresh_dir(std::string("cli-time-passes-") + command);
    const std::string args = std::string(command) + " " + spec("tiny.fsdp") +
                             (std::string(command) == "emit" ? " --target cpu -o " + dir : "");
    CmdResult r = run(args + " --time-passes");
    ASSERT_EQ(r.status, 0) << r.out;
    std::vector<std::string> passes;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (!std::regex_match(l, m, line)) continue;
      passes.push_back(m[1]);
      EXPECT_GE(std::stod(m[2]), 0.0) << l;
    }
    std::vector<std::string> expected = {"frontend", "support", "lower", "schedule",
                                         "memory",   "verify",  "cost"};
    if (std::string(command) == "emit") expected.push_back("emit");
    EXPECT_EQ(passes, expected) << command << "\n" << r.out.substr(0, 2000);
    CmdResult quiet = run(args);
    ASSERT_EQ(quiet.status, 0) << quiet.out;
    EXPECT_FALSE(has(quiet, "pass frontend")) << quiet.out.substr(0, 2000);
  }
}

// --sources DIR keeps the generated program beside the build: the very
// source `fsdpgen emit` writes for the spec, compiled into the binary (whose
// --print-schedule is the spec's schedule).
TEST(CliBuild, SourcesKeepsTheEmittedProgram) {
  const std::string dir = fresh_dir("cli-build-sources");
  CmdResult b = run("build " + spec("tiny.fsdp") + " --target cpu --sources " + dir + "/src -o " +
                    dir + "/train");
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(has(b, "fsdpgen: built " + dir + "/train from")) << b.out;
  CmdResult e = run("emit " + spec("tiny.fsdp") + " --target cpu -o " + dir + "/emitted");
  ASSERT_EQ(e.status, 0) << e.out;
  const std::string kept = file_bytes(dir + "/src/train.cpp");
  EXPECT_FALSE(kept.empty());
  EXPECT_TRUE(kept == file_bytes(dir + "/emitted/train.cpp"))
      << "the kept source differs from `fsdpgen emit`'s";
  CmdResult printed = fsdpgen::test::run_command(dir + "/train --print-schedule");
  ASSERT_EQ(printed.status, 0) << printed.out;
  CmdResult schedule = run("schedule " + spec("tiny.fsdp") + " --gpu cpu");
  ASSERT_EQ(schedule.status, 0) << schedule.out;
  EXPECT_TRUE(printed.out == schedule.out) << printed.out.substr(0, 2000);
}

// A plain build drops the runtime's debug information (55 of 58 MB on tiny;
// hundreds of test binaries filled a CI disk) and keeps the symbols; with
// --sources, where the user debugs, the binary keeps it. Both run.
TEST(CliBuild, DebugInformationOnlyWithSources) {
  const std::string dir = fresh_dir("cli-build-debug-info");
  CmdResult plain = run("build " + spec("tiny.fsdp") + " --target cpu -o " + dir + "/plain");
  ASSERT_EQ(plain.status, 0) << plain.out;
  CmdResult kept = run("build " + spec("tiny.fsdp") + " --target cpu --sources " + dir +
                       "/src -o " + dir + "/kept");
  ASSERT_EQ(kept.status, 0) << kept.out;
  const std::string plain_bytes = file_bytes(dir + "/plain");
  const std::string kept_bytes = file_bytes(dir + "/kept");
  // Section names live in the ELF string table: present only where the section is.
  EXPECT_EQ(plain_bytes.find(".debug_info"), std::string::npos);
  EXPECT_NE(kept_bytes.find(".debug_info"), std::string::npos);
  EXPECT_NE(plain_bytes.find("fsdpgen"), std::string::npos) << "the symbols were stripped too";
  EXPECT_LT(plain_bytes.size() * 4, kept_bytes.size())
      << plain_bytes.size() << " B against " << kept_bytes.size() << " B";
  for (const char* binary : {"/plain", "/kept"}) {
    CmdResult step = fsdpgen::test::run_command("cd " + dir + " && ." + binary +
                                                " --steps 1 --checkpoint-every 0");
    EXPECT_EQ(step.status, 0) << binary << "\n" << step.out;
  }
}

// A compiler that fails is fsdpgen's internal error (exit 3): the command is
// printed, nothing is left behind (neither a binary nor the temporary source).
TEST(CliBuild, CompilerFailureIsAnInternalError) {
  for (const char* cxx : {"false", "/nonexistent/c++"}) {
    const std::string dir = fresh_dir("cli-build-cxx-fails");
    std::filesystem::create_directories(dir + "/tmp");
    CmdResult r = fsdpgen::test::run_command(
        fmt::format("TMPDIR={0}/tmp FSDPGEN_CXX={1} {2} build {3} --target cpu -o {0}/train", dir,
                    cxx, FSDPGEN_BIN, spec("tiny.fsdp")));
    EXPECT_EQ(r.status, 3) << cxx << "\n" << r.out;
    EXPECT_TRUE(has(r, fmt::format("fsdpgen: internal error: compiling the generated program "
                                   "failed:\n  {} ",
                                   cxx)))
        << r.out;
    EXPECT_TRUE(has(r, " -o " + dir + "/train ")) << r.out;
    EXPECT_TRUE(has(r, "(run with --sources DIR to keep the source)")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/train"));
    EXPECT_TRUE(std::filesystem::is_empty(dir + "/tmp")) << "the temporary source is left behind";
  }
}

// Outputs that cannot be written are the user's errors (exit 1), named, and
// build leaves no binary.
TEST(CliErrors, UnwritableOutputsAreUserErrors) {
  const std::string dir = fresh_dir("cli-unwritable");
  std::ofstream(dir + "/file") << "a file, not a directory\n";
  CmdResult emit = run("emit " + spec("tiny.fsdp") + " --target cpu -o " + dir + "/file/out");
  EXPECT_EQ(emit.status, 1) << emit.out;
  EXPECT_TRUE(has(emit, "fsdpgen: error: cannot create '" + dir + "/file/out'")) << emit.out;
  CmdResult schedule = run("schedule " + spec("tiny.fsdp") + " -o " + dir);
  EXPECT_EQ(schedule.status, 1) << schedule.out;
  EXPECT_TRUE(has(schedule, "fsdpgen: error: cannot write '" + dir + "'")) << schedule.out;
  CmdResult sources = run("build " + spec("tiny.fsdp") + " --target cpu --sources " + dir +
                          "/file/src -o " + dir + "/train");
  EXPECT_EQ(sources.status, 1) << sources.out;
  EXPECT_TRUE(has(sources, "fsdpgen: error: cannot write '" + dir + "/file/src/train.cpp'"))
      << sources.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/train"));
  CmdResult tmp = fsdpgen::test::run_command(
      fmt::format("TMPDIR={0}/missing {1} build {2} --target cpu -o {0}/train", dir, FSDPGEN_BIN,
                  spec("tiny.fsdp")));
  EXPECT_EQ(tmp.status, 1) << tmp.out;
  EXPECT_TRUE(has(tmp, "fsdpgen: error: cannot create a temporary directory: ")) << tmp.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/train"));
}

}  // namespace

// An unknown first word that names no file is an unknown subcommand (exit 2,
// a usage error), with the nearest subcommand and all of them; a word that
// looks like a spec path is still built (`fsdpgen spec.fsdp -o train`).
TEST(CliErrors, UnknownSubcommandIsNamed) {
  const std::string dir = fresh_dir("cli-unknown-subcommand");
  CmdResult typo = run("plna " + spec("tiny.fsdp"));
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_TRUE(has(typo, "fsdpgen: error: unknown subcommand 'plna'; did you mean 'plan'?"))
      << typo.out;
  EXPECT_TRUE(has(typo,
                  "'check', 'schedule', 'plan', 'emit', 'build', 'merge', 'calibrate', "
                  "'check-layer', 'compare', 'import-hf', 'prepare', 'prepare-eval', 'metrics', "
                  "'train-tokenizer', 'sample' or 'tune'"))
      << typo.out;
  // The error lists exactly the subcommands --help lists, in its order.
  CmdResult help = run("--help");
  std::string listed;
  bool in_section = false;
  std::istringstream lines(help.out);
  for (std::string line; std::getline(lines, line);) {
    if (line == "Subcommands:")
      in_section = true;
    else if (in_section && line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
      listed += (listed.empty() ? "'" : "', '") + line.substr(2, line.find(' ', 2) - 2);
  }
  ASSERT_FALSE(listed.empty()) << help.out;
  const size_t last = listed.rfind("', '");
  listed = listed.substr(0, last) + "' or '" + listed.substr(last + 4) + "'";
  EXPECT_TRUE(has(typo, "subcommands are " + listed + ", or a spec file")) << listed << "\n"
                                                                           << typo.out;
  EXPECT_FALSE(has(typo, "--output is required")) << typo.out;
  CmdResult train = run("train " + spec("tiny.fsdp") + " -o " + dir + "/x");
  EXPECT_EQ(train.status, 2) << train.out;
  EXPECT_TRUE(has(train, "fsdpgen: error: unknown subcommand 'train'")) << train.out;
  EXPECT_FALSE(has(train, "did you mean")) << train.out;
  EXPECT_FALSE(has(train, "was not expected")) << train.out;
  CmdResult missing = run(dir + "/missing.fsdp -o " + dir + "/x");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_TRUE(has(missing, "cannot read spec file '" + dir + "/missing.fsdp'")) << missing.out;
}

// A binary that cannot be written is the user's error (exit 1, one line naming
// the path and why), found before anything is compiled: a missing directory,
// a directory that is a file, an output that is a directory, a directory no
// file can be created in.
TEST(CliBuild, UnwritableBinaryIsAUserError) {
  const std::string dir = fresh_dir("cli-build-unwritable");
  std::ofstream(dir + "/file") << "a file, not a directory\n";
  std::filesystem::create_directories(dir + "/adir");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/missing/train", "'" + dir + "/missing' does not exist"},
      {dir + "/file/train", "'" + dir + "/file' is not a directory"},
      {dir + "/adir", "it is a directory"},
      {"/proc/train", "cannot create files in '/proc': "}};  // even as root
  for (const auto& [output, reason] : cases) {
    CmdResult r = run(spec("tiny.fsdp") + " --target cpu -o " + output);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r, "fsdpgen: error: cannot write the binary '" + output + "': " + reason))
        << r.out;
    EXPECT_FALSE(has(r, "internal error")) << r.out;
    EXPECT_FALSE(has(r, " -o " + output)) << "the compiler ran:\n" << r.out;
  }
}

// Wording: every message of fsdpgen's own starts with its name (clang's
// convention for errors with no source location), --help names the program,
// and a hardware name's prefix suggests the name it begins, in any case.
TEST(CliErrors, MessagesNameTheProgram) {
  for (const char* command : {"check", "plan"}) {
    CmdResult r = run(std::string(command) + " /nonexistent/x.fsdp");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r, "fsdpgen: error: cannot read spec file '/nonexistent/x.fsdp'")) << r.out;
  }
  CmdResult help = run("--help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_TRUE(has(help, "Usage: fsdpgen [OPTIONS] SUBCOMMAND")) << help.out;
  CmdResult plan_help = run("plan --help");
  EXPECT_TRUE(has(plan_help, "Usage: fsdpgen plan [OPTIONS] spec")) << plan_help.out;
}

TEST(CliPlan, HardwarePrefixSuggestsTheNameItBegins) {
  for (const char* gpu : {"h100", "H100", "H100-S"}) {
    CmdResult r = run("plan " + spec("tiny.fsdp") + " --gpu " + gpu);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_TRUE(has(r, fmt::format("unknown hardware '{}'; did you mean 'h100-sxm'?", gpu)))
        << r.out;
  }
  CmdResult typo = run("plan " + spec("tiny.fsdp") + " --gpu A100-80");
  EXPECT_TRUE(has(typo, "did you mean 'a100-80g' or 'a100-80g-roce'?")) << typo.out;
}

// A known name in another case is that name: the plan and the generated
// source say the canonical one.
TEST(CliPlan, HardwareNamesMatchInAnyCase) {
  CmdResult upper = run("plan " + spec("tiny.fsdp") + " --gpu H100-SXM");
  CmdResult lower = run("plan " + spec("tiny.fsdp") + " --gpu h100-sxm");
  ASSERT_EQ(upper.status, 0) << upper.out;
  EXPECT_TRUE(has(upper, "plan of tiny on 2 x h100-sxm: NVIDIA H100")) << upper.out;
  // The same plan: all but the first line (which quotes the flag) and the planner's time.
  auto body = [](const std::string& out) {
    return out.substr(out.find('\n'), out.find("planned in") - out.find('\n'));
  };
  EXPECT_EQ(body(upper.out), body(lower.out));
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/cli-gpu-case";
  CmdResult emit = run("emit " + spec("tiny.fsdp") + " --target cuda --gpu H200 -o " + dir);
  ASSERT_EQ(emit.status, 0) << emit.out;
  EXPECT_NE(file_bytes(dir + "/train.cpp").find("--gpu h200"), std::string::npos);
}

// The lines of `text` that contain `s`.
std::vector<std::string> lines_with(const std::string& text, const std::string& s) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(s) != std::string::npos) found.push_back(line);
  return found;
}

// An error caused by a command-line value is the flag's (Clang's style for
// errors with no source location); the spec's line for the value it replaced
// appears only as a note, never as the error's location.
void expect_flag_error(const std::string& args, const std::string& flag,
                       const std::string& spec_name) {
  CmdResult r = run("plan " + spec(spec_name) + " " + args);
  EXPECT_EQ(r.status, 1) << r.out;
  std::vector<std::string> errors = lines_with(r.out, "error: ");
  ASSERT_FALSE(errors.empty()) << r.out;
  EXPECT_TRUE(errors[0].starts_with("fsdpgen: error: " + flag + ": ")) << r.out;
  for (const std::string& line : lines_with(r.out, spec_name + ":"))
    EXPECT_NE(line.find(": note: "), std::string::npos) << line << "\n" << r.out;
}

TEST(CliErrors, OverrideErrorsNameTheFlag) {
  // Not a multiple of ranks_per_node 8 nor of shard_group 8 (both in the spec).
  expect_flag_error("--world 2", "--world 2", "gpt2-1.5b.fsdp");
  CmdResult r = run("plan " + spec("gpt2-1.5b.fsdp") + " --world 2");
  EXPECT_TRUE(has(r, "gpt2-1.5b.fsdp:19:3: note: the spec says world = 16 here")) << r.out;
  EXPECT_TRUE(has(r, "gpt2-1.5b.fsdp:20:3: note: ranks_per_node is 8 here")) << r.out;
  EXPECT_TRUE(has(r, "gpt2-1.5b.fsdp:22:3: note: shard_group is 8 here")) << r.out;
  // Out of range.
  expect_flag_error("--world 0", "--world 0", "tiny.fsdp");
  expect_flag_error("--micro-batch 0", "--micro-batch 0", "tiny.fsdp");
  // More ranks in a shard group than a unit has parameters.
  expect_flag_error("--world 524288", "--world 524288", "tiny.fsdp");
}

namespace {

// Whether this machine shows fsdpgen a GPU (what its build target follows).
bool gpu_visible_here() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// The plan's lines after the first (which says why it is for that device)
// and before the planning time (which varies).
std::string plan_figures(const std::string& plan) {
  const size_t first = plan.find('\n') + 1, timed = plan.rfind("planned in ");
  return plan.substr(first, timed - first);
}

}  // namespace

// Without --gpu, plan and schedule are for what `fsdpgen spec.fsdp -o train`
// builds here: this CPU where no GPU is visible. The plan's first line says
// which device and why; schedule's stdout is the built binary's
// --print-schedule, its note (on stderr) says the same.
TEST(CliPlan, DefaultHardwareIsWhatABuildHereTargets) {
  if (gpu_visible_here()) GTEST_SKIP() << "a GPU is visible: the default is a GPU's";
  CmdResult plan = run("plan " + spec("tiny.fsdp"));
  ASSERT_EQ(plan.status, 0) << plan.out;
  EXPECT_TRUE(plan.out.starts_with("plan of tiny on 2 x cpu: ")) << plan.out;
  EXPECT_TRUE(has(plan,
                  "(no GPU here: planning for this CPU, which a build here targets; --gpu "
                  "h100-sxm plans for a GPU)\n"))
      << plan.out;
  CmdResult cpu = run("plan " + spec("tiny.fsdp") + " --gpu cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.out;
  EXPECT_TRUE(has(cpu, "(--gpu cpu)\n")) << cpu.out;
  EXPECT_EQ(plan_figures(plan.out), plan_figures(cpu.out));
  CmdResult h100 = run("plan " + spec("tiny.fsdp") + " --gpu h100-sxm");
  ASSERT_EQ(h100.status, 0) << h100.out;
  EXPECT_NE(plan_figures(plan.out), plan_figures(h100.out)) << "the test tells the two apart";

  const std::string dir = fresh_dir("cli-default-hardware");
  CmdResult b = run(spec("tiny.fsdp") + " -o " + dir + "/train");
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(has(b, "for CPU")) << b.out;
  CmdResult printed = fsdpgen::test::run_command(dir + "/train --print-schedule");
  ASSERT_EQ(printed.status, 0) << printed.out;
  CmdResult schedule = fsdpgen::test::run_command(
      fmt::format("({} schedule {} 2>{}/note)", FSDPGEN_BIN, spec("tiny.fsdp"), dir));
  ASSERT_EQ(schedule.status, 0) << schedule.out;
  EXPECT_TRUE(printed.out == schedule.out) << schedule.out.substr(0, 2000);
  EXPECT_EQ(file_bytes(dir + "/note"),
            "fsdpgen: note: schedule for cpu (no GPU here: planning for this CPU, which a build "
            "here targets; --gpu h100-sxm plans for a GPU)\n");
}

// A plan that does not fit exits 4 (documented in plan --help), after the
// whole plan; sizes read in MiB below 1 GiB, GiB below 1 TiB, else TiB, and
// each equals its exact byte count in that unit to the 2 printed decimals
// (the device arena's; GPT-1T's offloaded state, the host arena's).
TEST(CliPlan, NotFittingExitsFourAndLargeSizesReadInGiBOrTiB) {
  CmdResult help = run("plan --help");
  EXPECT_TRUE(has(help, "4 it does not")) << help.out;
  const std::regex arena(
      R"((?:device arena|host arena \(offload\):) ([0-9.]+) (MiB|GiB|TiB) \((\d+) B\))");
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"gpt-1t.fsdp --world 8 --gpu h100-sxm", 4, "TiB"},
      {"gpt2-350m.fsdp --micro-batch 64 --gpu a100-40g", 4, "GiB"},
      {"gpt-175b.fsdp --world 512 --gpu a100-80g", 0, "GiB"},
      {"tiny.fsdp --gpu h100-sxm", 0, "MiB"}};
  for (const auto& [args, status, unit] : cases) {
    CmdResult r = run("plan " + spec(args));
    EXPECT_EQ(r.status, status) << args << "\n" << r.out;
    EXPECT_TRUE(has(r, status == 0 ? "fits: yes" : "fits: NO")) << r.out;
    EXPECT_TRUE(has(r, "planned in ")) << "the whole plan is printed\n" << r.out;
    std::smatch m;  // the arena printed in `unit`
    bool found = false;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), arena);
         !found && it != std::sregex_iterator(); ++it)
      if ((*it)[2] == unit) m = *it, found = true;
    ASSERT_TRUE(found) << args << ": no arena size in " << unit << "\n" << r.out;
    const double bytes = std::stod(m[3]);
    const int shift = unit == "MiB" ? 20 : unit == "GiB" ? 30 : 40;
    // 0.005: the value is printed rounded to 2 decimals.
    EXPECT_NEAR(std::stod(m[1]), bytes / static_cast<double>(1LL << shift), 0.005) << args;
    EXPECT_LT(bytes, static_cast<double>(1LL << (shift + 10))) << args;
    if (unit != "MiB") {
      EXPECT_GE(bytes, static_cast<double>(1LL << shift)) << args;
    }
  }
}

// --dump-after PASS: after the pass, "*** IR after PASS ***" on stderr and
// the IR in that IR's own printer; the command's output (stdout) is unchanged.
TEST(CliDumpAfter, EachPassPrintsItsIr) {
  const std::string dir = fresh_dir("cli-dump-after");
  const std::vector<std::pair<std::string, std::string>> passes = {
      {"frontend", "model tiny {"},
      {"support", "the CPU backend can build this spec"},
      {"lower", "segments (forward order):"},
      {"schedule", "stream compute ("},
      {"memory", "memory per rank: device arena"},
      {"verify", "the plan keeps every invariant"},
      {"cost", "MFU"},
      {"emit", "// Generated by fsdpgen from "},
      {"build", "fsdpgen: built "}};
  CmdResult plain = fsdpgen::test::run_command(
      fmt::format("{} plan {} --gpu cpu 2>/dev/null", FSDPGEN_BIN, spec("tiny.fsdp")));
  ASSERT_EQ(plain.status, 0) << plain.out;
  for (const auto& [pass, ir] : passes) {
    const std::string command = pass == "build"  ? "build --target cpu -o " + dir + "/train"
                                : pass == "emit" ? "emit --target cpu -o " + dir
                                                 : "plan --gpu cpu";
    const std::string verb = command.substr(0, command.find(' '));
    CmdResult r = fsdpgen::test::run_command(
        fmt::format("({0} {1} {2}{3} --dump-after {4} 2>{5}/stderr >{5}/stdout)", FSDPGEN_BIN, verb,
                    spec("tiny.fsdp"), command.substr(verb.size()), pass, dir));
    ASSERT_EQ(r.status, 0) << pass << "\n" << file_bytes(dir + "/stderr");
    const std::string err = file_bytes(dir + "/stderr");
    const std::string header = "*** IR after " + pass + " ***\n";
    const size_t at = err.find(header);
    ASSERT_NE(at, std::string::npos) << pass << "\n" << err.substr(0, 2000);
    EXPECT_EQ(err.find(header, at + 1), std::string::npos) << "printed once: " << pass;
    EXPECT_NE(err.find(ir, at), std::string::npos) << pass << "\n" << err.substr(at, 2000);
    if (verb == "plan") {  // the plan is the same but for its planning time
      EXPECT_EQ(plan_figures(file_bytes(dir + "/stdout")), plan_figures(plain.out)) << pass;
    }
  }
}

// An unknown pass, or one after the subcommand's last, is a usage error
// that lists the subcommand's passes (with a did-you-mean for a misspelling).
TEST(CliDumpAfter, UnknownOrUnreachedPassIsAUsageError) {
  CmdResult typo = run("plan " + spec("tiny.fsdp") + " --dump-after=shedule");
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_TRUE(has(typo,
                  "fsdpgen: error: --dump-after shedule: no such pass; did you mean 'schedule'? "
                  "plan runs 'frontend', 'support', 'lower', 'schedule', 'memory', 'verify' and "
                  "'cost'\n"))
      << typo.out;
  CmdResult later = run("check " + spec("tiny.fsdp") + " --dump-after lower");
  EXPECT_EQ(later.status, 2) << later.out;
  EXPECT_TRUE(has(later,
                  "fsdpgen: error: --dump-after lower: check stops after support; check runs "
                  "'frontend' and 'support'\n"))
      << later.out;
  CmdResult none = run("schedule " + spec("tiny.fsdp") + " --dump-after xyz");
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_TRUE(has(none, "--dump-after xyz: no such pass; schedule runs 'frontend',")) << none.out;
  EXPECT_FALSE(has(none, "stream compute")) << "nothing planned";
}

// --no-reuse (for debugging): every buffer its own range, so the arena is at
// least the plan's "without reuse" total, which reuse beats.
TEST(CliPlan, NoReuseGivesEveryBufferItsOwnMemory) {
  const std::regex arena(R"(device arena [0-9.]+ MiB \((\d+) B\).* (\d+) B without reuse)");
  std::smatch with, without;
  CmdResult reuse = run("plan " + spec("tiny.fsdp") + " --gpu cpu");
  CmdResult no_reuse = run("plan " + spec("tiny.fsdp") + " --gpu cpu --no-reuse");
  ASSERT_EQ(reuse.status, 0) << reuse.out;
  ASSERT_EQ(no_reuse.status, 0) << no_reuse.out;
  ASSERT_TRUE(std::regex_search(reuse.out, with, arena)) << reuse.out;
  ASSERT_TRUE(std::regex_search(no_reuse.out, without, arena)) << no_reuse.out;
  EXPECT_EQ(with[2], without[2]);  // the same buffers
  EXPECT_LT(std::stoll(with[1]), std::stoll(with[2]));
  EXPECT_GE(std::stoll(without[1]), std::stoll(without[2]));
}

// compare TRACE --ranks A,B: rank B of a two-rank trace against rank A (here
// a predicted step copied as rank 1 with its forward ops twice as long), and
// what the mode refuses.
TEST(CliCompare, TwoRanksOfOneTrace) {
  const std::string dir = fresh_dir("cli_compare_ranks");
  ASSERT_EQ(run(fmt::format("schedule {} --world 2 --gpu cpu --format trace -o {}/p.json",
                            spec("tiny.fsdp"), dir))
                .status,
            0);
  nlohmann::json two = nlohmann::json::parse(file_bytes(dir + "/p.json"));
  two["otherData"].erase("figures");
  nlohmann::json& events = two["traceEvents"];
  const size_t n = events.size();
  int forwards = 0;
  for (size_t i = 0; i < n; ++i) {
    if (events[i]["ph"] != "X" && events[i]["name"] != "thread_name") continue;
    nlohmann::json e = events[i];
    e["pid"] = 1;
    if (e["ph"] == "X" && e["args"]["kind"] == "F")
      e["dur"] = 2 * e["dur"].get<double>(), ++forwards;
    events.push_back(e);
  }
  ASSERT_GT(forwards, 0);
  std::ofstream(dir + "/two.json") << two.dump();

  CmdResult r = run(fmt::format("compare {}/two.json --ranks 0,1 --top 3", dir));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "rank 1 against rank 0 (of 2)")) << r.out;
  EXPECT_TRUE(has(r, "per op kind (count)              rank 0 ms     rank 1 ms    ratio")) << r.out;
  const std::regex row(fmt::format(R"(\nF \({}\) +[0-9.]+ +[0-9.]+ +2\.00x\n)", forwards));
  EXPECT_TRUE(std::regex_search(r.out, row)) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nB \(\d+\) +[0-9.]+ +[0-9.]+ +1\.00x\n)")))
      << r.out;
  EXPECT_TRUE(has(r, "largest difference first (top 3)")) << r.out;

  auto fails = [&](const std::string& args, int status, const std::string& message) {
    CmdResult e = run("compare " + args);
    EXPECT_EQ(e.status, status) << args << "\n" << e.out;
    EXPECT_TRUE(has(e, message)) << args << "\n" << e.out;
  };
  fails(dir + "/p.json --ranks 0,1", 1, "p.json holds one rank (a predicted trace): --ranks");
  fails(dir + "/two.json --ranks 0,2", 1,
        "--ranks 0,2: " + dir + "/two.json holds ranks 0 to 1, not 2");
  fails(dir + "/two.json --ranks 1", 2, "--ranks 1: expected two ranks of the trace as A,B");
  fails(dir + "/two.json --ranks 0,-1", 2, "--ranks 0,-1: expected two ranks");
  fails(dir + "/p.json " + dir + "/two.json --ranks 0,1", 2, "give that trace alone, not two");
  fails(dir + "/two.json", 2, "compare needs a predicted and a measured trace, or one measured");
  fails(dir + "/two.json --ranks 0,1 -o " + dir + "/m.json", 2, "excludes");
}
