// Tables: the program's tables that the runtime's executor walks
// (runtime/program.h), each written by its own function: the schedule's
// text, buffers (and with --check their red zones and lives), tensors,
// units, ops with their dependencies, and kProgram, the settings.
#pragma once

#include <string>
#include <vector>

#include "codegen/emit/EmitContext.h"

namespace fsdpgen::emit {

std::string schedule_table(const EmitContext& c);                        // kScheduleText
std::string buffer_tables(const EmitContext& c, const ProgramNotes& n);  // kBuffers, ...
std::string tensor_table(const EmitContext& c);                          // kTensors
std::string unit_table(const EmitContext& c);                            // kUnits
std::string op_table(const EmitContext& c);    // kDeps<op>, kOps, kHostOps
std::string muon_table(const EmitContext& c);  // kMuonMatrices (optimizer = muon(...); else "")
int muon_matrix_count(const EmitContext& c);
// The ops a CUDA program runs on the host (none on the CPU target).
std::vector<int> host_ops(const EmitContext& c);
// kProgram, which names the tables above, and the CPU workspace's check.
std::string program_table(const EmitContext& c, const ProgramNotes& n);

}  // namespace fsdpgen::emit
