// CustomLayers: the glue that calls a custom layer (DESIGN §9) in a block's
// forward and backward: a local of the layer's type with its members
// pointed into the arena (EmitContext's CustomGlue says where), its entry
// point for the target, and the residual add around it.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/emit/OpWriter.h"

namespace fsdpgen::emit {

// A custom layer's forward: y = layer(x) into its output (a saved row, or
// the block's output `dst`; "" in a recompute, which keeps only the saved
// rows), then a residual branch adds its residual row.
void custom_forward(OpWriter& w, Body& b, int64_t block, int custom, int params, At slot,
                    const std::string& dst);
// A custom layer's backward: d(output) is in dres (a residual branch's,
// which is also its residual row's share) or dtmp (a norm's); d(input) goes
// to dtmp for the norm before it, or through custom_out into dres.
void custom_backward(OpWriter& w, Body& b, int64_t block, int custom, int params, int grads,
                     At slot);
// An added layer's input row in the slot (where the family's last piece
// writes), declared once in a body.
std::string added_input(const OpWriter& w, Body& b, int custom, At slot);

// ", tensor_init::normal, 0.02f" for a custom layer's tensor (its header's
// initialisation), "" for the others (initialized by name).
std::string tensor_init_fields(const EmitContext& c, const FlatTensor& tensor);
// A header's name as the step includes it (its directory is on the
// compiler's include path: codegen/emit/Build.h).
std::string header_name(const std::string& header);

}  // namespace fsdpgen::emit
