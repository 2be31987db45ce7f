// AST of a spec file: sections of entries, each node with its source span.
// The parser builds it without knowing which keys exist; the checker (Check.h)
// interprets it against the schema and produces a Spec.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/Source.h"

namespace fsdpgen::ast {

struct Arg;

// value = NUMBER | STRING | IDENT | tuple | list | range | call
struct Value {
  enum class Kind { Number, String, Ident, Tuple, List, Range, Call };
  Kind kind = Kind::Ident;
  Span span;
  std::string text;  // Ident: the name; String: decoded contents; Number: spelling; Call: callee
  double number = 0;
  int64_t integer = 0;
  bool is_integer = false;
  std::vector<Value> items;  // Tuple and List elements; Range: {low, high}
  std::vector<Arg> args;     // Call arguments
};

// arg = [ IDENT "=" ] value
struct Arg {
  std::string name;  // empty for a positional argument
  Span name_span;
  Value value;
};

// entry = IDENT "=" value | IDENT "{" { entry } "}" | IDENT "(" [ arg { "," arg } ] ")"
// An entry whose key parsed but whose rest did not is kept as Kind::Error
// (already reported): its key counts as given, but its value is unknown.
struct Entry {
  enum class Kind { Assign, Block, Call, Error };
  Kind kind = Kind::Assign;
  std::string key;
  Span key_span;
  Span span;
  Value value;                 // Assign: the value; Call: a Value of kind Call named `key`
  std::vector<Entry> entries;  // Block
};

// layer = "embed" | "final_norm" | "head" | "block" NUMBER [ ".." NUMBER ]
struct LayerRef {
  enum class Kind { Embed, FinalNorm, Head, Block };
  Kind kind = Kind::Block;
  Span span;
  int64_t first = 0;  // Block: first index
  int64_t last = 0;   // Block: last index, inclusive
  std::string piece;  // Block: a module of each block ("attn.c_attn"), or empty: all of it
  Span piece_span;
};

// units_item = "each" ("block" | "linear") | "group" NUMBER [ "blocks" ] | "min_params" NUMBER
//            | "unit" [ IDENT ] "[" layer { "," layer } "]"
struct UnitItem {
  enum class Kind { Each, EachLinear, Group, MinParams, Explicit };
  Kind kind = Kind::Each;
  Span span;
  Value count;       // Group: blocks per unit; MinParams: parameter count
  std::string name;  // Explicit: optional name
  Span name_span;
  std::vector<LayerRef> layers;  // Explicit
};

// section = "model" IDENT "{" { entry } "}" | "units" "{" { units_item } "}"
//         | ("layers" | "parallel" | "train") "{" { entry } "}"
struct Section {
  std::string kind;  // model, layers, units, parallel, train
  Span kind_span;
  std::string name;  // model: its name
  Span name_span;
  Span span;
  std::vector<Entry> entries;
  std::vector<UnitItem> units;
};

// file = { section } EOF
struct File {
  std::vector<Section> sections;
};

}  // namespace fsdpgen::ast
