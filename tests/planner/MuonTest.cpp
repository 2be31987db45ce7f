// MuonTest: the Muon owner assignment (codegen/planner/Muon.h): each matrix's slices
// cover it exactly once and sit where the flat shards put them (also for
// lowered specs of every strategy), owners balance Newton-Schulz FLOPs within
// the largest matrix's, the answer is deterministic and pinned for a case
// worked out by hand, a shard group of one owns everything, and bad inputs
// are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codegen/planner/Muon.h"
#include "codegen/planner/Verify.h"
#include "tests/common/ExpectError.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

// Slices in rank order, contiguous, covering [0, elems) once, each where the
// flat layout puts it: rank * shard_elems + shard_offset is the flat element
// offset_elems + begin, inside that rank's shard.
void expect_slices_tile(const MuonMatrix& m, const MuonOwner& o, int64_t shard_elems,
                        int64_t shard_group) {
  SCOPED_TRACE(m.name);
  ASSERT_FALSE(o.slices.empty());
  int64_t next = 0, last_rank = -1;
  for (const MuonSlice& s : o.slices) {
    EXPECT_GT(s.rank, last_rank);
    EXPECT_LT(s.rank, shard_group);
    EXPECT_EQ(s.begin, next);
    EXPECT_LT(s.begin, s.end);
    EXPECT_GE(s.shard_offset, 0);
    EXPECT_LE(s.shard_offset + (s.end - s.begin), shard_elems);
    EXPECT_EQ(s.rank * shard_elems + s.shard_offset, m.offset_elems + s.begin);
    next = s.end;
    last_rank = s.rank;
  }
  EXPECT_EQ(next, m.elems());
  EXPECT_GE(o.owner, 0);
  EXPECT_LT(o.owner, shard_group);
}

void expect_balanced(const MuonAssignment& a) {
  double largest = 0;
  for (const MuonOwner& o : a.matrices)
    largest = std::max(largest, o.ns_flops);
  const auto [lo, hi] = std::minmax_element(a.rank_flops.begin(), a.rank_flops.end());
  EXPECT_LE(*hi - *lo, largest);
  double total = 0, per_rank = 0;
  for (const MuonOwner& o : a.matrices)
    total += o.ns_flops;
  for (double f : a.rank_flops)
    per_rank += f;
  EXPECT_DOUBLE_EQ(per_rank, total);
}

// A unit's matrices packed from offset 0 with gaps (biases, norms) between.
std::vector<MuonMatrix> packed(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                               int64_t gap) {
  std::vector<MuonMatrix> out;
  int64_t offset = gap;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.push_back({"m" + std::to_string(i), shapes[i].first, shapes[i].second, offset});
    offset += out.back().elems() + gap;
  }
  return out;
}

int64_t flat_end(const std::vector<MuonMatrix>& ms) {
  int64_t end = 0;
  for (const MuonMatrix& m : ms)
    end = std::max(end, m.offset_elems + m.elems());
  return end;
}

TEST(MuonOwners, NewtonSchulzFlopsByHand) {
  // m = 4, n = 8: per iteration 4 m^2 n + 2 m^3 = 512 + 128.
  EXPECT_DOUBLE_EQ(muon_ns_flops(4, 8, 5), 5 * 640.0);
  EXPECT_DOUBLE_EQ(muon_ns_flops(8, 4, 5), 5 * 640.0);
  EXPECT_DOUBLE_EQ(muon_ns_flops(3, 3, 1), 4 * 27.0 + 2 * 27.0);
  EXPECT_DOUBLE_EQ(muon_ns_flops(3, 3, 0), 0.0);
}

// Many layouts: slices tile every matrix and loads balance.
TEST(MuonOwners, SlicesCoverEachMatrixOnceAndLoadsBalance) {
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> units = {
      {{64, 192}, {64, 64}, {64, 256}, {256, 64}},  // a GPT-2 block, width 64
      {{3, 7}, {7, 3}, {1, 1}, {5, 5}},
      {{96, 32}, {32, 96}, {64, 64}, {17, 33}, {33, 17}, {128, 8}},
      {{1000, 1}},
  };
  for (size_t u = 0; u < units.size(); ++u)
    for (int64_t gap : {0, 13, 64})
      for (int64_t S : {1, 2, 3, 4, 8, 64}) {
        SCOPED_TRACE("unit " + std::to_string(u) + " gap " + std::to_string(gap) + " S " +
                     std::to_string(S));
        const std::vector<MuonMatrix> ms = packed(units[u], gap);
        const int64_t shard_elems = (flat_end(ms) + gap + S - 1) / S;
        const MuonAssignment a = assign_muon_owners(ms, shard_elems, S, 5);
        ASSERT_EQ(a.matrices.size(), ms.size());
        ASSERT_EQ(a.rank_flops.size(), static_cast<size_t>(S));
        for (size_t i = 0; i < ms.size(); ++i)
          expect_slices_tile(ms[i], a.matrices[i], shard_elems, S);
        expect_balanced(a);
      }
}

// Four shards of 100: a matrix inside rank 0's, one from 90 to 210 across
// three shards, one inside rank 2's; worked out by hand.
TEST(MuonOwners, MatricesCrossingShardBoundaries) {
  const std::vector<MuonMatrix> ms = {{"a", 10, 9, 0}, {"b", 12, 10, 90}, {"c", 4, 5, 250}};
  const MuonAssignment a = assign_muon_owners(ms, 100, 4, 5);
  EXPECT_EQ(a.matrices[0].slices, (std::vector<MuonSlice>{{0, 0, 90, 0}}));
  EXPECT_EQ(a.matrices[1].slices,
            (std::vector<MuonSlice>{{0, 0, 10, 90}, {1, 10, 110, 0}, {2, 110, 120, 0}}));
  EXPECT_EQ(a.matrices[2].slices, (std::vector<MuonSlice>{{2, 0, 20, 50}}));
  // b is the largest: all ranks idle, it goes to rank 1, which holds most of
  // it; a next to the least loaded rank holding most of a (0); c then has
  // ranks 2 and 3 idle and goes to 2, which holds it.
  EXPECT_EQ(a.matrices[1].owner, 1);
  EXPECT_EQ(a.matrices[0].owner, 0);
  EXPECT_EQ(a.matrices[2].owner, 2);
}

// Same input, same answer; and a case pinned by hand: one large matrix
// across both shards and four small ones, two in each shard.
TEST(MuonOwners, DeterministicAndPinned) {
  const std::vector<MuonMatrix> ms = packed({{8, 8}, {8, 8}, {16, 16}, {8, 8}, {8, 8}}, 0);
  const MuonAssignment a = assign_muon_owners(ms, 256, 2, 5);
  const MuonAssignment b = assign_muon_owners(ms, 256, 2, 5);
  for (size_t i = 0; i < ms.size(); ++i)
    EXPECT_EQ(a.matrices[i].owner, b.matrices[i].owner);
  EXPECT_EQ(a.rank_flops, b.rank_flops);
  // m2 (16, 16) goes first and lies at [128, 384), 128 elements on each
  // rank: the tie goes to rank 0. The small ones follow in input order, each
  // to rank 1, which stays the less loaded (4 small < 1 large).
  const double small = muon_ns_flops(8, 8, 5), large = muon_ns_flops(16, 16, 5);
  EXPECT_EQ(large, 8 * small);
  EXPECT_EQ(a.matrices[2].owner, 0);
  EXPECT_EQ(a.matrices[0].owner, 1);
  EXPECT_EQ(a.matrices[1].owner, 1);
  EXPECT_EQ(a.matrices[3].owner, 1);
  EXPECT_EQ(a.matrices[4].owner, 1);
  EXPECT_EQ(a.rank_flops, (std::vector<double>{large, 4 * small}));
}

// Equal loads go to the rank that holds most of the matrix.
TEST(MuonOwners, TiesGoToTheHolder) {
  const std::vector<MuonMatrix> ms = {{"late", 4, 4, 300}};
  const MuonAssignment a = assign_muon_owners(ms, 100, 4, 5);
  EXPECT_EQ(a.matrices[0].owner, 3);
}

// Loads carried from earlier units steer the next unit's matrices away from
// the loaded ranks.
TEST(MuonOwners, PriorLoadsCarryAcrossUnits) {
  const std::vector<MuonMatrix> ms = packed({{8, 8}, {8, 8}}, 0);
  const double small = muon_ns_flops(8, 8, 5);
  const MuonAssignment a = assign_muon_owners(ms, 32, 4, 5, {3 * small, 0, 3 * small, small});
  EXPECT_EQ(a.matrices[0].owner, 1);
  // m0 to rank 1, the idle one; then ranks 1 and 3 tie at one small, and
  // m1 ([64, 128): ranks 2 and 3) goes to rank 3, which holds half of it.
  EXPECT_EQ(a.matrices[1].owner, 3);
  EXPECT_EQ(a.rank_flops, (std::vector<double>{3 * small, small, 3 * small, 2 * small}));
}

TEST(MuonOwners, ShardGroupOfOneOwnsEverythingLocally) {
  const std::vector<MuonMatrix> ms = packed({{64, 192}, {64, 64}, {256, 64}}, 7);
  const int64_t flat = flat_end(ms) + 9;
  const MuonAssignment a = assign_muon_owners(ms, flat, 1, 5);
  for (size_t i = 0; i < ms.size(); ++i) {
    EXPECT_EQ(a.matrices[i].owner, 0);
    EXPECT_EQ(a.matrices[i].slices,
              (std::vector<MuonSlice>{{0, 0, ms[i].elems(), ms[i].offset_elems}}));
  }
}

// Lowered specs of every strategy: slices where Lower's shards put them; a
// shard group of one (no_shard) owns every matrix on rank 0.
TEST(MuonOwners, LoweredSpecs) {
  for (const auto& [sharding, world, group] :
       std::vector<std::tuple<std::string, int, int>>{{"full_shard", 4, 0},
                                                      {"shard_grad_op", 2, 0},
                                                      {"no_shard", 4, 0},
                                                      {"hybrid_shard", 4, 2},
                                                      {"full_shard", 8, 0}}) {
    Config c;
    c.sharding = sharding;
    c.world = world;
    c.shard_group = group;
    c.width = 96;
    SCOPED_TRACE(c.name());
    const Planned p = plan_text(c.text());
    const int64_t S = p.units.spec.parallel.shard_group;
    EXPECT_EQ(S, sharding == "no_shard" ? 1 : group ? group : world);
    std::vector<double> loads;
    for (const FlatUnit& u : p.units.units) {
      if (u.index == 0) continue;  // the root: embeddings and head stay with AdamW
      const std::vector<MuonMatrix> ms = muon_matrices(p.units, u.index);
      ASSERT_EQ(ms.size(), 4u);  // c_attn, c_proj, c_fc, mlp.c_proj
      const MuonAssignment a = assign_muon_owners(ms, u.shard_elems, S, 5, loads);
      loads = a.rank_flops;
      bool crosses = false;
      for (size_t i = 0; i < ms.size(); ++i) {
        expect_slices_tile(ms[i], a.matrices[i], u.shard_elems, S);
        crosses |= a.matrices[i].slices.size() > 1;
        if (S == 1) {
          EXPECT_EQ(a.matrices[i].owner, 0);
        }
      }
      EXPECT_EQ(crosses, S > 1);
    }
    double largest = muon_ns_flops(96, 4 * 96, 5);
    const auto [lo, hi] = std::minmax_element(loads.begin(), loads.end());
    EXPECT_LE(*hi - *lo, largest);
  }
}

TEST(MuonOwners, BadInputsNameTheProblem) {
  expect_error<std::invalid_argument>(
      [] {
        assign_muon_owners({{"q", 4, 4, 0}, {"k", 4, 4, 10}}, 64, 2, 5);
      },
      {"matrices q at [0, 16) and k at [10, 26) overlap"});
  expect_error<std::invalid_argument>(
      [] {
        assign_muon_owners({{"w", 8, 8, 100}}, 64, 2, 5);
      },
      {"matrix w at [100, 164)", "outside", "128 elements (2 ranks x 64)"});
  expect_error<std::invalid_argument>(
      [] {
        assign_muon_owners({{"w", 0, 8, 0}}, 64, 2, 5);
      },
      {"matrix w of shape (0, 8)", "positive"});
  expect_error<std::invalid_argument>([] { assign_muon_owners({}, 64, 0, 5); },
                                      {"shard group of 0 ranks"});
  expect_error<std::invalid_argument>([] { assign_muon_owners({}, 64, 2, -1); }, {"ns_steps -1"});
  expect_error<std::invalid_argument>([] { assign_muon_owners({}, 64, 2, 5, {1.0}); },
                                      {"1 prior loads for a shard group of 2 ranks"});
}

TEST(MuonOwners, PrintsOneMatrixALine) {
  const std::vector<MuonMatrix> ms = {{"c_attn", 4, 12, 40}};
  const MuonAssignment a = assign_muon_owners(ms, 50, 2, 5);
  EXPECT_EQ(print_muon_assignment(ms, a),
            "c_attn (4, 12) owner 1, 4.48e-06 GFLOP, slices r0 [0, 10) r1 [10, 48)\n"
            "Newton-Schulz GFLOP per rank: 0 4.48e-06\n");
}

std::vector<std::string> names_of(const std::vector<MuonMatrix>& ms) {
  std::vector<std::string> out;
  for (const MuonMatrix& m : ms)
    out.push_back(m.name);
  return out;
}

// GPT-2: each block's four projections, stored (in, out) as Conv1D keeps
// them; the root (embeddings, tied head, final norm) has none.
TEST(MuonMatrices, Gpt2BlocksProjectionsStoredInOut) {
  Config c;
  c.width = 64;
  const Planned p = plan_text(c.text());
  EXPECT_TRUE(muon_matrices(p.units, 0).empty()) << "embeddings and head stay with AdamW";
  const std::vector<MuonMatrix> ms = muon_matrices(p.units, 2);
  EXPECT_EQ(names_of(ms),
            (std::vector<std::string>{
                "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_proj.weight",
                "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight"}));
  ASSERT_EQ(ms.size(), 4u);
  EXPECT_EQ(ms[0].rows, 64);
  EXPECT_EQ(ms[0].cols, 192);
  EXPECT_TRUE(ms[0].stored_transposed) << "c_attn is (in 64, out 192)";
  EXPECT_FALSE(ms[1].stored_transposed) << "square: either way";
  EXPECT_TRUE(ms[2].stored_transposed) << "c_fc is (in 64, out 256)";
  EXPECT_TRUE(ms[3].stored_transposed) << "mlp.c_proj is (in 256, out 64)";
  for (const FlatUnit& u : p.units.units)
    for (const MuonMatrix& m : muon_matrices(p.units, u.index)) {
      const auto t = std::find_if(u.tensors.begin(), u.tensors.end(),
                                  [&](const FlatTensor& x) { return x.name == m.name; });
      ASSERT_NE(t, u.tensors.end());
      EXPECT_EQ(t->offset_elems, m.offset_elems) << m.name;
    }
}

// Llama: seven projections a block, stored (out, in) as nn.Linear keeps them
// (k_proj and v_proj of grouped-query attention are (kv, width)); an untied
// head stays with AdamW.
TEST(MuonMatrices, LlamaBlocksProjectionsStoredOutIn) {
  const Planned p = plan_text(
      "model l { family = llama vocab = 256 context = 32 width = 64 heads = 4 kv_heads = 2 "
      "layers = 2 ffn_hidden = 96 tie_embeddings = false }\n"
      "units { each block }\nparallel { world = 2 sharding = full_shard }\n"
      "train { micro_batch = 2 }\n");
  EXPECT_TRUE(muon_matrices(p.units, 0).empty());
  const std::vector<MuonMatrix> ms = muon_matrices(p.units, 1);
  ASSERT_EQ(ms.size(), 7u) << ::testing::PrintToString(names_of(ms));
  EXPECT_EQ(ms[1].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(ms[1].rows, 32);
  EXPECT_EQ(ms[1].cols, 64);
  for (const MuonMatrix& m : ms)
    EXPECT_FALSE(m.stored_transposed) << m.name;
}

// Per-linear units hold one matrix each (and a norm unit none); the plan
// assigns every unit's matrices in backward order with the loads carried, so
// that the model's loads end within the largest matrix of each other.
TEST(MuonMatrices, PlanCoversEveryUnitAndBalancesTheModel) {
  Config c;
  c.world = 4;
  c.units = "each linear";
  const Planned p = plan_text(c.text());
  const MuonPlan plan = plan_muon(p.units, 5);
  ASSERT_EQ(plan.matrices.size(), p.units.units.size());
  size_t total = 0;
  double largest = 0;
  for (size_t u = 0; u < plan.matrices.size(); ++u) {
    EXPECT_LE(plan.matrices[u].size(), u == 0 ? 0u : 1u) << p.units.units[u].name;
    EXPECT_EQ(plan.owners[u].matrices.size(), plan.matrices[u].size());
    total += plan.matrices[u].size();
    for (const MuonOwner& o : plan.owners[u].matrices)
      largest = std::max(largest, o.ns_flops);
  }
  EXPECT_EQ(total, 4u * static_cast<size_t>(c.layers));
  const std::vector<double>& loads = plan.owners[0].rank_flops;  // the last assigned: every unit's
  ASSERT_EQ(loads.size(), 4u);
  const auto [lo, hi] = std::minmax_element(loads.begin(), loads.end());
  EXPECT_LE(*hi - *lo, largest);
  EXPECT_GT(*lo, 0) << "every rank orthogonalizes some matrix";
}

// Memory by hand: GPT-2 width 64 (F 256), 2 blocks at world 2. Each
// block's matrices are c_attn 64x192 (12288), c_proj 64x64 (4096), c_fc and
// mlp.c_proj 64x256 (16384 each): 49152 elements a block, 98304 in all. A
// shard group of one owns everything: momentum 98304 x 4 bytes, nothing
// gathered (its gradients are read in place), the workspace of a 64x256 matrix (2 m n + 2 m m
// floats, m 64, n 256: 40960 x 4). Two ranks split each block's loads: no
// rank gathers more than one block's matrices (fp32 gradient and update,
// 8 bytes an element), and the two together hold every
// matrix's momentum once.
TEST(MuonMatrices, MemoryByHand) {
  Config c;
  c.layers = 2;
  c.world = 1;
  const Planned one = plan_text(c.text());
  const MuonMemory m1 = muon_memory(plan_muon(one.units, 5), 1, 4);
  EXPECT_EQ(m1.momentum_bytes, 98304 * 4);
  EXPECT_EQ(m1.gathered_bytes, 0);
  EXPECT_EQ(m1.workspace_bytes, 40960 * 4);
  c.world = 2;
  const Planned two = plan_text(c.text());
  const MuonPlan plan = plan_muon(two.units, 5);
  const MuonMemory m2 = muon_memory(plan, 2, 4);
  EXPECT_LT(m2.momentum_bytes, m1.momentum_bytes);
  EXPECT_GE(m2.momentum_bytes, m1.momentum_bytes / 2);
  EXPECT_GT(m2.gathered_bytes, 0);
  EXPECT_LE(m2.gathered_bytes, 49152 * 8);
  EXPECT_LE(m2.workspace_bytes, m1.workspace_bytes);
  int64_t owned[2] = {0, 0};
  for (size_t u = 0; u < plan.matrices.size(); ++u)
    for (size_t i = 0; i < plan.matrices[u].size(); ++i)
      owned[plan.owners[u].matrices[i].owner] += plan.matrices[u][i].elems();
  EXPECT_EQ(owned[0] + owned[1], 98304);
  EXPECT_EQ(m2.momentum_bytes, 4 * std::max(owned[0], owned[1]));
}

std::string with_muon(const Config& c) {
  std::string t = c.text();
  const std::string train = "train { micro_batch = 2 }";
  t.replace(t.find(train), train.size(), "train { micro_batch = 2 optimizer = muon }");
  return t;
}

// optimizer = muon(...) under every strategy and knob the planner covers
// (offload aside: refused): the schedule carries each unit's Muon ops in
// order and Verify finds nothing wrong with it or its memory plan; the
// compacted AdamW state and the Muon buffers are what muon_unit and
// muon_memory say.
TEST(MuonSchedule, EveryStrategyVerifies) {
  int planned = 0;
  for (const Config& c : covering_configs()) {
    if (c.offload != "none" || c.world > 64) continue;
    SCOPED_TRACE(c.name());
    const Planned p = plan_text(with_muon(c));
    const std::vector<std::string> errors = verify_plan(p.schedule, p.memory);
    EXPECT_TRUE(errors.empty()) << errors.front();
    const int64_t S = p.spec.parallel.shard_group;
    int ns = 0, gathers = 0, scatters = 0;
    for (const Op& op : p.schedule.ops) {
      ns += op.kind == OpKind::MuonOrthogonalize;
      gathers += op.kind == OpKind::MuonGather;
      scatters += op.kind == OpKind::MuonScatter;
    }
    int with_matrices = 0;
    for (const auto& m : p.schedule.muon.matrices)
      with_matrices += !m.empty();
    EXPECT_EQ(ns, with_matrices);
    EXPECT_EQ(gathers, S > 1 ? with_matrices : 0);
    EXPECT_EQ(scatters, gathers);
    for (const Buffer& b : p.schedule.buffers) {
      if (b.kind == BufferKind::OptimizerState) {
        EXPECT_EQ(b.bytes,
                  2 * 4 *
                      muon_unit(p.schedule.muon, b.unit, p.units.units[b.unit].shard_elems, S)
                          .adamw_elems);
      }
    }
    ++planned;
  }
  EXPECT_GT(planned, 100);
}

// Verify catches a Muon schedule put together wrongly: Newton-Schulz before
// its gather is waited for, an owner outside the shard group, a slice that
// leaves a hole.
TEST(MuonSchedule, VerifyNamesWhatIsWrong) {
  Config c;
  c.world = 2;
  const Planned p = plan_text(with_muon(c));
  ASSERT_TRUE(verify_plan(p.schedule, p.memory).empty());
  auto first_error = [&](const Schedule& s) {
    const std::vector<std::string> e = verify_plan(s, p.memory);
    return e.empty() ? std::string() : e.front();
  };
  Schedule no_wait = p.schedule;
  for (Op& op : no_wait.ops)
    if (op.kind == OpKind::MuonOrthogonalize) {
      op.deps.erase(
          std::remove_if(op.deps.begin(), op.deps.end(),
                         [&](int d) { return no_wait.ops[d].kind == OpKind::MuonGather; }),
          op.deps.end());
      break;
    }
  EXPECT_NE(first_error(no_wait).find("does not wait for its gather"), std::string::npos)
      << first_error(no_wait);
  Schedule bad_owner = p.schedule;
  bad_owner.muon.owners[1].matrices[0].owner = 2;
  EXPECT_NE(first_error(bad_owner).find("outside its shard group of 2"), std::string::npos)
      << first_error(bad_owner);
  Schedule hole = p.schedule;
  MuonOwner& o = hole.muon.owners[1].matrices[0];
  ASSERT_FALSE(o.slices.empty());
  o.slices.back().end -= 1;
  EXPECT_NE(first_error(hole).find("cover"), std::string::npos) << first_error(hole);
}

}  // namespace
}  // namespace fsdpgen::test
