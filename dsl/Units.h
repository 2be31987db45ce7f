// Units: wrap-unit resolution (explicit unit lists, the wrap policy for the
// blocks they leave, the root unit, a tied embedding and head kept together),
// the names of automatic units, and whether each unit can be sharded over a
// shard group. layer_runs is the one grouping of consecutive blocks: it names
// units here and prints their layer lists in dsl/Print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/Ast.h"
#include "dsl/CheckContext.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// A layer that is not a block, a block's piece, or a run of consecutive whole blocks.
struct LayerRun {
  LayerId first;       // the layer, or the run's first block
  int64_t last_block;  // blocks only: the run's last block (first.block when alone)
  bool operator==(const LayerRun&) const = default;
};

// [embed, block 0, block 1, block 2, block 5, head] -> embed | blocks 0..2 | block 5 | head
std::vector<LayerRun> layer_runs(const std::vector<LayerId>& layers);

// The name of an automatic unit: "block3", "blocks0_2", "embed_block0",
// "block3_ln_1_attn_c_attn" (pieces).
std::string auto_unit_name(const ModelSpec& m, const std::vector<LayerId>& layers);

// Fills ctx.spec.units from the 'units' section (nullptr when there is none)
// for a model whose keys were all read; reports bad unit lists.
void resolve_units(const ast::Section* sec, CheckContext& ctx);

// The units a policy alone gives a model (no explicit units): what the
// planner's alternatives try, e.g. each linear for a plan whose gathered
// blocks do not fit.
UnitsSpec policy_units(const ModelSpec& m, UnitPolicy policy);
// The units `group k blocks` gives a model (as the units section would).
UnitsSpec group_units(const ModelSpec& m, int64_t k);

// Every rank of a shard group owns an equal, aligned slice of every unit;
// reports the first unit smaller than the group, which would leave ranks
// holding only padding. Runs only on a spec without errors.
void check_shardable(CheckContext& ctx);

}  // namespace fsdpgen
