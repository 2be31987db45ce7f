// Rules: the rules between keys (heads divide width, shard_group divides
// world, fp16 master weights, warmup within the run, ...), one function per
// rule, listed in one table by the section whose keys they relate.
#pragma once

#include "dsl/Fields.h"

namespace fsdpgen {

enum class RuleSection { Model, Parallel, Train };

// Runs the rules of one section, in the table's order, on ctx.spec once its
// keys, overrides and defaults are in; true when none reported an error.
bool check_rules(RuleSection section, const CheckContext& ctx);

}  // namespace fsdpgen
