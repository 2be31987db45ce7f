// Parser: recursive descent from tokens to the AST (Ast.h). Syntax errors are
// reported to the Diagnostics and the parser recovers at the next entry, so
// one run reports every error. Precondition: none; any byte string parses to
// some AST (possibly empty) in time linear in its length.
#pragma once

#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"

namespace fsdpgen {

ast::File parse(const SourceFile& file, Diagnostics& diags);

}  // namespace fsdpgen
