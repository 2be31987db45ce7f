// Compare: `fsdpgen compare`, a predicted step against a measured one op by
// op, or two ranks of one measured step (codegen/planner/Compare.h).
#pragma once

#include <string>
#include "codegen/cli/Command.h"

namespace fsdpgen {

// Adds `compare` and its flags to `app`.
Command add_compare_command(CLI::App& app);

// `predicted` against `measured` for measured rank `rank`, the `top` largest
// differences (0: all), also written as one Perfetto trace to `merged` when
// it is not empty; with `ranks` ("A,B") and no `measured`, two ranks of the
// one trace `predicted`.
int run_compare(const std::string& predicted, const std::string& measured, int rank, int top,
                const std::string& merged, const std::string& ranks);

}  // namespace fsdpgen
