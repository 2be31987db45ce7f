// Check: semantic analysis. Interprets the AST against the spec schema, fills
// every default, resolves wrap units to explicit layer lists and checks the
// rules of DESIGN §2 (heads divide width, shard_group divides world, tied
// embedding placement, positive sizes, unknown/duplicate keys, dtype names,
// conflicting options, worlds the model cannot be sharded over). All errors
// are collected; the Spec is returned only when there are none.
#pragma once

#include <optional>
#include <string>

#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"
#include "dsl/Spec.h"
#include "dsl/SpecOverrides.h"

namespace fsdpgen {

// Overrides replace the spec's values before the cross-field checks. A
// custom layer header's relative path is found from `spec_dir`.
std::optional<Spec> check(const ast::File& file, Diagnostics& diags,
                          const SpecOverrides& overrides = {}, const std::string& spec_dir = "");

}  // namespace fsdpgen
