// CustomLayers: the spec's `layers { import = "x.h"  mlp = SwiGluMlp(...) }`
// section (DESIGN §9): runs the layer reader on the header (layers/ReadLayers.h),
// finds each named layer, binds its hyper-parameters to the model's values or
// to numbers, and records the bound layers in ModelSpec::custom. Every error
// is located at the spec's text, with did-you-mean; the reader's own
// diagnostics (in Clang's format, at the header's line) follow as notes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "dsl/Ast.h"
#include "dsl/Fields.h"
#include "dsl/Spec.h"
#include "dsl/layer_reader/LayerDecl.h"

namespace fsdpgen {

// The reader fsdpgen runs: $FSDPGEN_LAYER_READER, else the one built with
// fsdpgen ("" where Clang 19 was not found).
std::string layer_reader_path();

// The spec of `decl` bound to `values` (each hyper-parameter's value and the
// model key it came from, "" for a number) in place of `module`; nullopt with
// `error` saying what is wrong and *at where in the header (layers/LayerDecl.h's
// bind_layer).
std::optional<CustomLayerSpec> bind_custom_layer(const std::string& module,
                                                 const layers::LayerDecl& decl,
                                                 const std::map<std::string, int64_t>& values,
                                                 const std::map<std::string, std::string>& from,
                                                 std::string* error,
                                                 const layers::HeaderAt** at = nullptr);

// Precondition: the model's keys are read and their defaults filled. A
// relative header path is found from ctx.spec_dir.
void resolve_custom_layers(const ast::Section& layers, CheckContext& ctx);

}  // namespace fsdpgen
