// OpBodies: the body of each op's function in the generated program, one
// function per op kind: runtime calls on named pointers, each op's buffers
// found by their role on the op (codegen/planner/Schedule.h). Forward, recompute
// and backward walk the op's segment layer by layer (ForwardOps.cpp,
// BackwardOps.cpp); the collectives, copies, norm and optimizer are one
// call or a few (CommOps.cpp).
#pragma once

#include <string>

#include "codegen/emit/OpWriter.h"

namespace fsdpgen::emit {

std::string forward_op(OpWriter& w);
std::string recompute_op(OpWriter& w);
std::string backward_op(OpWriter& w);
std::string all_gather_op(OpWriter& w);
std::string reduce_scatter_op(OpWriter& w);
std::string all_reduce_op(OpWriter& w);
std::string copy_h2d_op(OpWriter& w);
std::string copy_d2h_op(OpWriter& w);
std::string grad_norm_op(OpWriter& w);
std::string optimizer_op(OpWriter& w);
// optimizer = muon(...) (MuonOps.cpp).
std::string muon_gather_op(OpWriter& w);
std::string muon_orthogonalize_op(OpWriter& w);
std::string muon_scatter_op(OpWriter& w);

}  // namespace fsdpgen::emit
