// template arguments nested a million deep (W<W<...>>, which -fbracket-depth
// does not bound), made by macros: past the reader's stack, an error, not a crash
// clang-format off
#define W1 W<
#define W2 W1 W1 W1 W1 W1 W1 W1 W1 W1 W1
#define W3 W2 W2 W2 W2 W2 W2 W2 W2 W2 W2
#define W4 W3 W3 W3 W3 W3 W3 W3 W3 W3 W3
#define W5 W4 W4 W4 W4 W4 W4 W4 W4 W4 W4
#define W6 W5 W5 W5 W5 W5 W5 W5 W5 W5 W5
#define W7 W6 W6 W6 W6 W6 W6 W6 W6 W6 W6
template <class T>
struct W {};
using X = W7 int;
// clang-format on
