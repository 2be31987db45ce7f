// layout: the tables that describe a model family's memory, one row per
// array: what a layer saves for its backward, the backward scratch, and a
// layer's parameter tensors, each sized in the model's dimensions. One table
// both totals the bytes (the planner) and carves the pointers (the runtime),
// as llm.c's fill_in_activation_sizes and malloc_and_point_activations share
// one list. Header-only, C++17 and free of MPI: the planner, the emitter, the
// runtime and nvcc all read it. A new family, or a custom layer
// (docs/custom-layers.md), is more tables of these same rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace fsdpgen::model {

// Each tensor of a flat parameter starts on this element boundary
// (codegen/planner/Lower.h lays them out; the runtime's carvers find them).
inline constexpr int64_t kTensorAlignElems = 16;

constexpr int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// The dimensions a row's extent is written in.
struct Dims {
  int64_t C = 0;       // width
  int64_t F = 0;       // MLP hidden
  int64_t H = 0;       // heads
  int64_t T = 0;       // context
  int64_t KV = 0;      // width of k (and of v): kv_heads * head_dim
  bool flash = false;  // attention saves log-sum-exp, not probabilities
  int64_t V = 0;       // vocabulary (true rows; Tensor::vocab_rows pads the stored ones)
  int64_t D = 0;       // head size (0: C / H); q is H * D wide
  constexpr int64_t head_dim() const { return D != 0 ? D : H != 0 ? C / H : 0; }
  constexpr int64_t q_width() const { return H * head_dim(); }
};

// A linear combination of the dimensions, e.g. 3 * C + F. Probs counts the
// attention probabilities per token: H * T, none with flash attention.
// Vocab and Context size the embedding and head tensors; HeadDim is a head's
// size and Q the width of q (heads * head size: C unless the head size is given).
struct Linear {
  int64_t one = 0, c = 0, f = 0, h = 0, kv = 0, probs = 0, v = 0, t = 0, hd = 0, q = 0;
  constexpr int64_t operator()(const Dims& d) const {
    return one + c * d.C + f * d.F + h * d.H + kv * d.KV + probs * (d.flash ? 0 : d.H * d.T) +
           v * d.V + t * d.T + hd * d.head_dim() + q * d.q_width();
  }
};
constexpr Linear operator+(const Linear& a, const Linear& b) {
  return {a.one + b.one,     a.c + b.c, a.f + b.f, a.h + b.h,   a.kv + b.kv,
          a.probs + b.probs, a.v + b.v, a.t + b.t, a.hd + b.hd, a.q + b.q};
}
constexpr Linear operator*(int64_t k, const Linear& a) {
  return {k * a.one,   k * a.c, k * a.f, k * a.h,  k * a.kv,
          k * a.probs, k * a.v, k * a.t, k * a.hd, k * a.q};
}
inline constexpr Linear One{1}, C{0, 1}, F{0, 0, 1}, H{0, 0, 0, 1}, KV{0, 0, 0, 0, 1},
    Probs{0, 0, 0, 0, 0, 1}, Vocab{0, 0, 0, 0, 0, 0, 1}, Context{0, 0, 0, 0, 0, 0, 0, 1},
    HeadDim{0, 0, 0, 0, 0, 0, 0, 0, 1}, Q{0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

// The largest of up to three linear extents (a buffer reused by several
// gradients is as large as the largest).
struct Extent {
  static constexpr int kMaxTerms = 3;
  Linear terms[kMaxTerms] = {};
  int count = 1;
  // Implicit, so that a row's extent reads as its Linear.
  constexpr Extent(const Linear& a) : terms{a} {}
  constexpr int64_t operator()(const Dims& d) const {
    int64_t largest = terms[0](d);
    for (int i = 1; i < count; ++i)
      largest = terms[i](d) > largest ? terms[i](d) : largest;
    return largest;
  }
};
constexpr Extent max_of(const Linear& a, const Linear& b) {
  Extent e(a);
  e.terms[1] = b;
  e.count = 2;
  return e;
}
constexpr Extent max_of(const Linear& a, const Linear& b, const Linear& c) {
  Extent e = max_of(a, b);
  e.terms[2] = c;
  e.count = 3;
  return e;
}

// ---- activation slots --------------------------------------------------------
// An array over the tokens of a micro-batch: the param dtype (2 or 4 bytes)
// or fp32 (norm statistics, log-sum-exp).
enum class Elem { Param, Fp32 };
// Which attention layout has the row.
enum class When { Always, Materialized, Flash };

struct Field {
  const char* name;
  Elem elem;
  Extent per_token;  // elements per token
  When when = When::Always;
  // The block piece (an index into its family's Piece table) whose forward
  // writes it; -1: none (the block's input, a final norm's or scratch rows).
  // A custom layer in place of a module drops the rows of its pieces.
  int piece = -1;
};

// A table's rows (a constexpr array, or rows read at run time).
template <class Row>
struct Table {
  const Row* rows = nullptr;
  size_t count = 0;
  constexpr Table() = default;
  template <size_t N>  // implicit: a constexpr array is a table
  constexpr Table(const Row (&a)[N]) : rows(a), count(N) {}
  constexpr const Row* begin() const { return rows; }
  constexpr const Row* end() const { return rows + count; }
  constexpr const Row& operator[](size_t i) const { return rows[i]; }
};

constexpr bool same_name(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// The row named `name`; a name the table lacks is a logic error.
template <class Row>
constexpr size_t index_of(Table<Row> t, const char* name) {
  for (size_t i = 0; i < t.count; ++i)
    if (same_name(t[i].name, name)) return i;
  throw std::logic_error("model layout: no row of this name");
}

constexpr bool present(const Field& f, const Dims& d) {
  return f.when == When::Always || (f.when == When::Flash) == d.flash;
}

constexpr int64_t elem_bytes(Elem t, int64_t param_bytes) {
  return t == Elem::Fp32 ? 4 : param_bytes;
}

// Byte offset of row `row` of a slot over `tokens` tokens (row == t.count:
// the slot's size). Rows are arrays over all tokens, in table order, each
// starting on a multiple of its element size; absent rows take no bytes.
constexpr int64_t offset_bytes(Table<Field> t, size_t row, const Dims& d, int64_t tokens,
                               int64_t param_bytes) {
  int64_t at = 0;
  for (size_t i = 0; i < row; ++i) {
    if (!present(t[i], d)) continue;
    const int64_t e = elem_bytes(t[i].elem, param_bytes);
    at = round_up(at, e) + t[i].per_token(d) * tokens * e;
  }
  return row < t.count ? round_up(at, elem_bytes(t[row].elem, param_bytes)) : at;
}

constexpr int64_t slot_bytes(Table<Field> t, const Dims& d, int64_t tokens, int64_t param_bytes) {
  return offset_bytes(t, t.count, d, tokens, param_bytes);
}

// A family's activation memory: what a block and the final norm save (the
// embedding and the head save nothing: the logits are their own buffer), and
// the backward scratch.
struct ActivationLayout {
  Table<Field> block;
  Table<Field> final_norm;
  Table<Field> backward_scratch;
};

// ---- parameter tensors -------------------------------------------------------
// A tensor's shape: one or two extents, row-major.
struct Shape {
  Linear dims[2] = {};
  int rank = 1;
  constexpr Shape(const Linear& n) : dims{n} {}  // implicit: {C} is a vector of C
  constexpr Shape(const Linear& rows, const Linear& cols) : dims{rows, cols}, rank(2) {}
  constexpr int64_t elems(const Dims& d) const {
    return rank == 1 ? dims[0](d) : dims[0](d) * dims[1](d);
  }
};

struct Tensor {
  const char* name;     // the runtime's field, e.g. qkv_w
  const char* hf_name;  // after the layer's Hugging Face prefix, e.g. attn.c_attn.weight
  Shape shape;
  bool vocab_rows = false;  // one row per token id: stored with the padded vocabulary's rows
};

// Element offset of tensor `row` from the layer's first tensor (row ==
// t.count: the layer's aligned length): in table order, each on a
// kTensorAlignElems boundary.
constexpr int64_t offset_elems(Table<Tensor> t, size_t row, const Dims& d) {
  int64_t at = 0;
  for (size_t i = 0; i < row; ++i)
    at = round_up(at + t[i].shape.elems(d), kTensorAlignElems);
  return at;
}

// ---- block pieces ------------------------------------------------------------
// A block's modules in forward order, the smallest things a wrap unit can
// hold (sub-block units, as the FSDP paper's GPT-1T wraps each linear layer):
// rows [first_tensor, first_tensor + tensors) of the block's tensor table
// (a weight and its bias are one piece), the multiply-adds per token of its
// matrix (in x out; a norm has none), and whether the attention core runs
// with it (after its matrix in forward, before it in backward). The pieces
// cover the table in order, so a block's runtime can run any range of them.
struct Piece {
  const char* name;  // the module after the block prefix, e.g. attn.c_attn
  int first_tensor = 0, tensors = 0;
  Linear in = {}, out = {};
  bool attention = false;
  constexpr bool linear() const { return in.one + in.c + in.f + in.kv + in.q != 0; }
};

// A module a custom layer can take the place of, or be added as (DESIGN §9).
// It replaces the block's pieces [first_piece, end_piece) (none: a layer
// added there). Its forward reads the saved row `input` (tokens, C) and
// writes (tokens, C) to the saved row `output`, or to the block's output
// where null; a residual branch (`residual` set) then adds that saved row.
// An added layer is a residual branch on the block's output so far, which
// the family's pieces write to a saved row of the layer's own, "<name>.x".
// Backward: the layer reads d(output) in the backward scratch's dres (a
// residual branch) or dtmp (a norm), and leaves d(input) in dtmp, where the
// norm before it reads it (`dinput_in_dtmp`), or adds it to dres.
struct Module {
  const char* name;
  int first_piece = 0, end_piece = 0;
  const char* input;     // null: an added layer's own row
  const char* output;    // null: the block's output
  const char* residual;  // null: none (a norm), or an added layer's own row
  bool dinput_in_dtmp = false;
  constexpr bool added() const { return first_piece == end_piece; }
};

// A family's parameter tensors, layer kind by layer kind. A block's names
// follow block_prefix (with its index for {}); the others are whole names.
// A tied head has no tensor of its own (it reads the embedding's).
struct ParamLayout {
  const char* block_prefix;
  Table<Tensor> embed;
  Table<Tensor> block;
  Table<Tensor> final_norm;
  Table<Tensor> head;
  Table<Piece> pieces;    // the block's, in forward order
  Table<Module> modules;  // those a custom layer can replace
};

}  // namespace fsdpgen::model
