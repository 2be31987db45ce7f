// LayerReader: what the planner needs of each custom layer (a class template
// using the API of layers/fsdpgen_layer.h) in a header Clang has parsed:
// hyper-parameters, parameters (shape, initialisation), saved arrays and
// scratch (per-token extents), forward FLOPs per token and entry points, as
// the JSON fsdpgen-layers prints (layers/LayerDecl.h reads it back).
#pragma once

#include <clang/AST/ASTContext.h>
#include <llvm/Support/JSON.h>

// Every layer class template of the main file (and of namespaces in it,
// however deep: `namespace a::b::...` nests without braces), in the order
// written, one JSON object each. Problems are errors (and notes) through
// ctx's DiagnosticsEngine, at the byte of a shape string where the problem
// is; throws only on a bug of the reader's own.
llvm::json::Array read_layers(clang::ASTContext& ctx);
