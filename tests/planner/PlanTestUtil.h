// Helpers for planner tests: spec text -> units, schedule, memory plan, and
// a generator of configurations covering every knob.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "dsl/Frontend.h"

namespace fsdpgen::test {

struct Planned {
  Spec spec;
  Units units;
  Schedule schedule;
  MemoryPlan memory;
};

inline Planned plan_text(const std::string& text, const ScheduleOptions& options = {}) {
  FrontendResult r = load_spec_text("plan.fsdp", text);
  EXPECT_TRUE(r.spec.has_value()) << r.diagnostics << "\n" << text;
  Planned p;
  if (!r.spec) return p;
  p.spec = *r.spec;
  p.units = lower(p.spec);
  p.schedule = build_schedule(p.units, options);
  p.memory = plan_memory(p.schedule);
  return p;
}

// One point of the configuration space, written as a spec.
struct Config {
  std::string sharding = "full_shard";
  int world = 2;
  int shard_group = 0;  // hybrid only
  bool forward_prefetch = true;
  std::string backward = "pre";
  int max_inflight = 2;
  std::string recompute = "none";
  std::string offload = "none";
  bool offload_activations = false;  // checkpointed activations to the host (recompute = block)
  int micro_batches = 1;
  std::string reduce = "every";
  std::string param = "fp32";
  std::string reduce_dtype = "fp32";
  std::string units = "each block";
  int layers = 4;
  int width = 64;
  bool tie = true;

  std::string name() const {
    return fmt::format(
        "{} w{}{} fwd={} bwd={} inflight={} recompute={} offload={} mb={} reduce={} {}/{} [{}] L{}",
        sharding, world, shard_group ? fmt::format("/{}", shard_group) : "", forward_prefetch,
        backward, max_inflight, recompute, offload + (offload_activations ? "+activations" : ""),
        micro_batches, reduce, param, reduce_dtype, units, layers);
  }

  std::string text() const {
    std::string group = shard_group ? fmt::format("shard_group = {}", shard_group) : "";
    return fmt::format(
        "model t {{ vocab = 256 context = 32 width = {} heads = 4 layers = {} tie_embeddings = {} "
        "}}\n"
        "units {{ {} }}\n"
        "parallel {{ world = {} sharding = {} {} ranks_per_node = {}\n"
        "  precision {{ param = {} reduce = {} master = fp32 }}\n"
        "  prefetch {{ forward = {} backward = {} max_inflight = {} }}\n"
        "  recompute = {} {} accumulate {{ micro_batches = {} reduce = {} }} }}\n"
        "train {{ micro_batch = 2 }}\n",
        width, layers, tie, units, world, sharding, group, std::min(world, 8), param, reduce_dtype,
        forward_prefetch, backward, max_inflight, recompute,
        offload_activations ? fmt::format("offload {{ params = {} activations = cpu }}", offload)
                            : fmt::format("offload = {}", offload),
        micro_batches, reduce);
  }
};

// Every strategy meets every value of every other knob, at worlds 1 to 512.
inline std::vector<Config> covering_configs() {
  std::vector<Config> out;
  const char* strategies[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard",
                              "hybrid_shard_zero2"};
  const int worlds[] = {1, 2, 4, 8, 64, 512};
  const char* backwards[] = {"pre", "post", "none"};
  const std::pair<int, const char*> accum[] = {{1, "every"}, {4, "every"}, {4, "last"}};
  int k = 0;
  for (const char* st : strategies)
    for (int w : worlds)
      for (const char* bwd : backwards)
        for (auto [mb, red] : accum)
          for (const char* rc : {"none", "block"}) {
            Config c;
            c.sharding = st;
            c.world = w;
            bool hybrid = c.sharding.rfind("hybrid", 0) == 0;
            if (hybrid && w < 4) continue;
            if (hybrid) c.shard_group = w / 2;
            c.backward = bwd;
            c.micro_batches = mb;
            c.reduce = red;
            c.recompute = rc;
            // Vary the rest along the way so that each value meets each strategy.
            c.forward_prefetch = k % 2 == 0;
            c.max_inflight = 2 + (k / 2) % 2;
            c.offload = (k % 5 == 0 && c.sharding != "no_shard" && w > 1) ? "cpu" : "none";
            c.param = (k / 3) % 2 ? "bf16" : "fp32";
            c.reduce_dtype = (k / 7) % 2 ? "bf16" : "fp32";
            const char* unit_policies[] = {"each block", "group 2 blocks",
                                           "unit head [final_norm] each block", "min_params 30K"};
            c.units = unit_policies[k % 4];
            if (w > 64 && c.units.find("head") != std::string::npos)
              c.units = "group 2 blocks";  // 128 params < 512 ranks
            c.tie = c.units.find("head") == std::string::npos;
            ++k;
            out.push_back(c);
          }
  return out;
}

}  // namespace fsdpgen::test
