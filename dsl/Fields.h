// Fields: reading each section against its table of keys (KeyTable.h: a
// key, how its value is read and printed), the defaults that follow from
// other keys and the command-line values that replace keys, into a
// CheckContext (CheckContext.h).
#pragma once

#include <cstdint>

#include "dsl/Ast.h"
#include "dsl/CheckContext.h"

namespace fsdpgen {

// Read one section into ctx.spec, reporting bad values, unknown and duplicate
// keys. read_model is false when a required key is missing.
bool read_model(const ast::Section& sec, CheckContext& ctx);
void read_parallel(const ast::Section& sec, CheckContext& ctx);
void read_train(const ast::Section& sec, CheckContext& ctx);

// The defaults that depend on other keys (kv_heads = heads, ranks_per_node =
// min(world, 8), ...), filled once the section and its overrides are read.
void fill_model_defaults(CheckContext& ctx);
void fill_parallel_defaults(CheckContext& ctx);
// The schedule's min_lr from its min_ratio, once the optimizer's lr is read.
void fill_train_defaults(CheckContext& ctx);

// --world N and --micro-batch B replace the spec's values; errors about them
// are the flag's, with a note where the spec sets the value replaced.
void override_world(CheckContext& ctx, int64_t world);
void override_micro_batch(CheckContext& ctx, int64_t micro_batch);

}  // namespace fsdpgen
