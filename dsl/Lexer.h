// Lexer: turns a spec file into tokens. Comments run from '#' to the end of
// the line. Numbers take an optional suffix (K M G T: powers of 1000; B is G;
// Ki Mi Gi Ti: powers of 1024) and may contain '_' separators: 50K, 1.5e-4,
// 124_439_808. Strings are double-quoted with \" \\ \n \t escapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/Diagnostics.h"

namespace fsdpgen {

enum class Tok {
  Eof,
  Ident,     // [A-Za-z_][A-Za-z0-9_]*
  Number,    // value in Token::number, exact integer in Token::integer when is_integer
  String,    // decoded contents in Token::str
  LBrace,    // {
  RBrace,    // }
  LParen,    // (
  RParen,    // )
  LBracket,  // [
  RBracket,  // ]
  Comma,     // ,
  Assign,    // =
  DotDot,    // ..
  Member,    // '.' right after a number, then a dotted module path: block 3.attn.c_attn
             // (Token::text holds the path without the leading dot)
  Invalid,  // an unusable token, already reported: a stray character, a bad number, an unterminated
            // string
};

// Human words for a token kind, for "unexpected X, expected Y".
const char* tok_name(Tok t);

struct Token {
  Tok kind = Tok::Eof;
  Span span;
  std::string text;  // source spelling (identifier name, number as written)
  double number = 0;
  int64_t integer = 0;
  bool is_integer = false;
  std::string str;
};

// Lexes the whole file. Errors go to `diags`; the result always ends in Eof.
std::vector<Token> lex(const SourceFile& file, Diagnostics& diags);

}  // namespace fsdpgen
