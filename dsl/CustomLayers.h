// CustomLayers: the spec's `layers { import = "x.h"  mlp = SwiGluMlp(...) }`
// section (DESIGN §9): runs the layer reader on the header (layers/ReadLayers.h),
// finds each named layer, binds its hyper-parameters to the model's values or
// to numbers, and records the bound layers in ModelSpec::custom. Every error
// is located at the spec's text, with did-you-mean; the reader's own
// diagnostics (in Clang's format, at the header's line) follow as notes.
#pragma once

#include <string>

#include "dsl/Ast.h"
#include "dsl/Fields.h"

namespace fsdpgen {

// The reader fsdpgen runs: $FSDPGEN_LAYER_READER, else the one built with
// fsdpgen ("" where Clang 19 was not found).
std::string layer_reader_path();

// Precondition: the model's keys are read and their defaults filled. A
// relative header path is found from ctx.spec_dir.
void resolve_custom_layers(const ast::Section& layers, CheckContext& ctx);

}  // namespace fsdpgen
