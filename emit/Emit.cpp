// Emit: the program writer. A Writer walks the schedule once, writing each
// op as a function of runtime calls on named pointers (each op's buffers
// found by their role on the op), and then the tables, within kColumns.
// Buffer pointers are arena offsets from the memory plan; activation slots
// and parameters follow the family's layout tables (model/gpt2.h,
// model/llama.h: runtime/gpt2.h and runtime/llama.h carve them,
// planner/Activations.h totals them), and each layer is a call of the
// family's runtime (gpt2_block_forward, llama_block_forward, ...) or of a
// custom layer's entry points (DESIGN §9), its members pointed into the arena.
#include "emit/Emit.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "dsl/Print.h"
#include "emit/Template.h"
#include "model/layout.h"
#include "planner/Activations.h"
#include "planner/Cost.h"
#include "planner/Hardware.h"
#include "planner/Validation.h"

namespace fsdpgen {

std::string schedule_text(const Schedule& s) {
  return print_units(s.units) + print_schedule(s);
}

namespace {

// The runtime's stream_id and comm_group enumerators are the planner's names
// (to_string); its op_kind enumerators are spelled out.
constexpr std::string_view kOpKindEnum[] = {
    "all_gather", "forward",  "recompute", "backward",  "reduce_scatter", "all_reduce",
    "free",       "copy_h2d", "copy_d2h",  "grad_norm", "optimizer_step"};

// The shortest literal that reads back as exactly v (fmt's round-trip form:
// 0.9, not 0.90000000000000002), always a floating literal (3.0, not 3).
std::string cpp_double(double v) {
  std::string out = fmt::format("{}", v);
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

std::string cpp_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20)
          out += fmt::format("\\{:03o}", static_cast<unsigned char>(ch));
        else
          out += ch;
    }
  }
  return out + "\"";
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s)
    h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string dtype_enum(DType d) {
  return d == DType::FP32   ? "dtype_id::fp32"
         : d == DType::BF16 ? "dtype_id::bf16"
                            : "dtype_id::fp16";
}
std::string ctype(DType d) {
  return d == DType::FP32 ? "float" : d == DType::BF16 ? "bf16" : "fp16";
}

// Every line of a generated program fits in this many columns.
constexpr size_t kColumns = 100;

// Where a line's trailing comment starts (outside string literals), or npos.
size_t trailing_comment(const std::string& line) {
  bool quoted = false;
  for (size_t k = 0; k + 1 < line.size(); ++k) {
    if (line[k] == '"' && (k == 0 || line[k - 1] != '\\')) quoted = !quoted;
    if (!quoted && line[k] == '/' && line[k + 1] == '/') return k;
  }
  return std::string::npos;
}

// A line of code longer than kColumns: its trailing comment goes on the line
// above when that makes the code fit; else it breaks after its last comma
// that fits (outside string literals and the comment), the rest indented by
// `more`, again while the rest is too long. A line with no such comma stays.
std::string wrap_line(const std::string& line, const std::string& more) {
  if (line.size() <= kColumns) return line;
  const std::string indent = line.substr(0, line.find_first_not_of(' '));
  const size_t comment = trailing_comment(line);
  if (comment != std::string::npos && comment > indent.size()) {
    const size_t code_end = line.find_last_not_of(' ', comment - 1) + 1;
    if (code_end <= kColumns)
      return indent + line.substr(comment) + "\n" + line.substr(0, code_end);
  }
  size_t cut = std::string::npos;
  bool quoted = false;
  for (size_t k = 0; k + 1 < line.size() && k < kColumns && k < comment; ++k) {
    if (line[k] == '"' && (k == 0 || line[k - 1] != '\\')) quoted = !quoted;
    if (!quoted && line[k] == ',' && line[k + 1] == ' ') cut = k + 1;
  }
  if (cut == std::string::npos) return line;
  return line.substr(0, cut) + "\n" + wrap_line(indent + more + line.substr(cut + 1), "");
}

// Text as `// ` comment lines within kColumns, broken between words; each
// '\n' in the text starts a new line.
std::string comment_lines(std::string_view text) {
  std::string out, line;
  auto flush = [&] {
    out += "//" + line + "\n";
    line.clear();
  };
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find_first_of(" \n", at), text.size());
    const std::string word(text.substr(at, end - at));
    if (!line.empty() && 3 + line.size() + word.size() > kColumns) flush();
    line += " " + word;
    if (end < text.size() && text[end] == '\n') flush();
    at = end + 1;
  }
  if (!line.empty()) flush();
  return out;
}

// A string as adjacent C++ literals, one line of the string (or a piece of
// one, to fit kColumns) per line of code, each line indented by `indent`.
std::string cpp_string_lines(std::string_view s, const std::string& indent) {
  std::string out;
  const size_t width = kColumns - indent.size() - 2;  // the quotes
  while (!s.empty()) {
    size_t end = s.find('\n');
    end = end == std::string_view::npos ? s.size() : end + 1;
    std::string piece = cpp_string(s.substr(0, end));
    size_t take = end;
    while (piece.size() > width) {  // a long line goes in pieces
      take = std::max<size_t>(1, take * width / piece.size());
      const size_t space = s.substr(0, take).rfind(' ');
      if (space != std::string_view::npos && space > 0) take = space + 1;  // between words
      piece = cpp_string(s.substr(0, take));
    }
    out += (out.empty() ? "" : "\n") + indent + piece;
    s.remove_prefix(take);
  }
  return out.empty() ? indent + "\"\"" : out;
}

// A designated initializer: `.name = value`, or `.name = {fields}`.
struct Init {
  std::string name, value;
  std::vector<Init> fields = {};
};

// A data source as program_data's fields: paths one per line.
std::vector<Init> data_fields(const DataSpec& d) {
  std::string paths;
  for (const std::string& p : d.paths)
    paths += (paths.empty() ? "" : "\n") + p;
  return {{"source", fmt::format("data_source::{}", to_string(d.kind))},
          {"seed", fmt::format("{}", d.seed)},
          {"paths", cpp_string(paths)}};
}

std::string one_line(const Init& f) {
  if (f.fields.empty()) return fmt::format(".{} = {}", f.name, f.value);
  std::vector<std::string> items;
  for (const Init& g : f.fields)
    items.push_back(one_line(g));
  return fmt::format(".{} = {{{}}}", f.name, fmt::join(items, ", "));
}

// Columns after the last newline of s, for s placed at column `col`.
size_t end_column(const std::string& s, size_t col) {
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? col + s.size() : s.size() - nl - 1;
}

// Room kept at the end of a line for the closing braces and comma after a field.
constexpr size_t kCloseRoom = 4;

std::string one_field(const Init& f, size_t col);

// `{.a = 1, .b = {...}, ...}` with its opening brace at column `col`, its
// fields packed into lines within kColumns, continuation lines aligned
// after the brace.
std::string braced(const std::vector<Init>& fields, size_t col) {
  std::string out = "{";
  size_t at = col + 1;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string item = one_line(fields[i]) + (i + 1 < fields.size() ? "," : "");
    const size_t start = i == 0 ? at : at + 1;
    if (i > 0 && start + item.size() + kCloseRoom > kColumns) {
      out += "\n" + std::string(col + 1, ' ');
      at = col + 1;
    } else if (i > 0) {
      out += " ";
      at = start;
    }
    const std::string text = one_field(fields[i], at) + (i + 1 < fields.size() ? "," : "");
    out += text;
    at = end_column(text, at);
  }
  return out + "}";
}

// `.name = value` at column `col`; a struct that does not fit on the line
// packs its fields into lines of their own.
std::string one_field(const Init& f, size_t col) {
  const std::string line = one_line(f);
  if (f.fields.empty() || col + line.size() + kCloseRoom <= kColumns) return line;
  const std::string head = fmt::format(".{} = ", f.name);
  return head + braced(f.fields, col + head.size());
}

// The built-in figures the schedule was planned for (the planner checked the name).
Hardware hardware_of(const std::string& name) {
  std::optional<Hardware> h = find_hardware(name);
  if (!h) throw std::logic_error(unknown_hardware_error(name));
  return *h;
}

class Writer {
 public:
  Writer(const std::string& spec_path, const Schedule& s, const MemoryPlan& m, const EmitTarget& t)
      : path_(spec_path),
        s_(s),
        m_(m),
        spec_(s.units.spec),
        model_(spec_.model),
        target_(t),
        hardware_(hardware_of(t.hardware)),
        cuda_(t.kind == EmitTarget::Kind::Cuda) {
    const ParallelSpec& p = spec_.parallel;
    comm_ = p.shard_group > 1 || p.replicas() > 1;
    pbytes_ = dtype_bytes(p.precision.param);
    reduce_ = unsharded_grad_dtype(p);
    rbytes_ = dtype_bytes(reduce_);
    // The spec's 16-bit type (param and reduce do not mix bf16 and fp16).
    half_ = p.precision.param != DType::FP32 ? p.precision.param : p.precision.reduce;
    act_ = {s.micro_batch * model_.context, pbytes_, s.options.flash_attention};
    N_ = act_.tokens;
  }

  std::string run() {
    std::string ops;
    for (const Op& op : s_.ops)
      ops += op_function(op);
    std::map<std::string, std::string> v;
    v["header"] = comment_lines(fmt::format(
        "Generated by fsdpgen from {}. Do not edit.\n"
        "{}: {} over {} rank{}, for the {}. The training step below is the planned schedule "
        "(`fsdpgen schedule {} --gpu {}`): one function per op, in issue order.",
        path_, model_.name, to_string(spec_.parallel.sharding), spec_.parallel.world,
        spec_.parallel.world == 1 ? "" : "s",
        cuda_ ? "CUDA runtime (runtime/cuda/)" : "CPU runtime (runtime/)", path_,
        target_.hardware));
    v["includes"] =
        cuda_ ? fmt::format(
                    "#include \"runtime/cuda/backend.h\"\n{}"
                    "#include \"runtime/cuda/step.h\"\n",
                    model_.family == Family::Llama ? "#include \"runtime/cuda/llama.h\"\n" : "")
              : fmt::format(
                    "#include \"runtime/{}.h\"\n#include \"runtime/program.h\"\n"
                    "#include \"runtime/step.h\"\n",
                    fam());
    if (custom_model() && cuda_) v["includes"] += "#include \"layers/fsdpgen_layer_cuda.h\"\n";
    for (const std::string& h : model_.layer_headers)  // their directories are on the include path
      v["includes"] += fmt::format("#include \"{}\"\n", header_name(h));
    v["main"] =
        fmt::format("int main(int argc, char** argv) {{ return {}(kProgram, argc, argv); }}\n",
                    cuda_ ? "cuda_train_main" : "train_main");
    if (m_.red_zone_bytes > 0)  // built with -fsanitize=address (runtime/red_zones.h)
      v["main"] +=
          "\n// --check: AddressSanitizer without leak reports (MPI's are not the step's), and\n"
          "// without alloc-dealloc pairing (runtime/allocations.cpp's operator new is malloc).\n"
          "extern \"C\" const char* __asan_default_options() {\n"
          "  return \"detect_leaks=0:alloc_dealloc_mismatch=0\";\n"
          "}\n";
    v["types"] = fmt::format(
        "using param_t = {};  // params and activations ({})\n"
        "using grad_t = {};   // unsharded gradients ({})\n",
        ctype(spec_.parallel.precision.param), to_string(spec_.parallel.precision.param),
        ctype(reduce_),
        comm_ ? std::string(to_string(spec_.parallel.precision.reduce)) : "fp32 on one rank");
    v["model"] =
        model_.family == Family::Llama
            ? fmt::format(
                  "// B sequences of T tokens, width C, H query heads, KV key/value "
                  "heads, MLP hidden F,\n"
                  "// vocab V; attention saves log-sum-exp; the embedding and head "
                  "are stored with V\n"
                  "// padded to Vp rows (pad_vocab_to {}); RMSNorm's epsilon.\n"
                  "constexpr llama_dims kDims{{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}f}};\n",
                  model_.pad_vocab_to, s_.micro_batch, model_.context, model_.width, model_.heads,
                  model_.kv_heads, model_.ffn_hidden, model_.vocab, act_.flash_attention,
                  model_.padded_vocab(), cpp_double(model_.norm_eps))
            : fmt::format(
                  "// B sequences of T tokens, width C, H heads, MLP hidden F, vocab V; "
                  "flash: attention\n"
                  "// saves log-sum-exp, not probabilities (the plan's layout, "
                  "planner/Activations.h);\n"
                  "// the embedding and head are stored with V padded to Vp rows "
                  "(pad_vocab_to {}).\n"
                  "constexpr gpt2_dims kDims{{{}, {}, {}, {}, {}, {}, {}, {}}};\n",
                  model_.pad_vocab_to, s_.micro_batch, model_.context, model_.width, model_.heads,
                  model_.ffn_hidden, model_.vocab, act_.flash_attention, model_.padded_vocab());
    v["ops"] = ops;
    v["tables"] = tables();
    return fill_template("emit/templates/train.cpp", embedded_template("train.cpp"), v);
  }

 private:
  // ---- buffers -------------------------------------------------------------
  const Buffer& buf(int id) const { return s_.buffers[static_cast<size_t>(id)]; }
  int64_t offset(int id) const { return m_.placements[static_cast<size_t>(id)].offset; }

  // A place in the arena: bytes into a buffer of the schedule (-1: none, nullptr).
  struct At {
    int buffer = -1;
    int64_t bytes = 0;
  };

  // The statements of an op, or of one layer's scope in it: first the named
  // pointers its calls take (each with the buffer it points into), then the calls.
  struct Body {
    std::string indent = "  ";
    std::string decls, calls;
    std::string text() const { return decls + calls; }
  };

  // Declares `type* name` at `at` in body and returns the name ("nullptr" for no buffer).
  std::string let(Body& body, const std::string& name, const std::string& type, At at) const {
    if (at.buffer < 0) return "nullptr";
    body.decls += fmt::format("{}{}* {} = {}<{}>(c, {});  // {}{}\n", body.indent, type, name,
                              buf(at.buffer).space == MemSpace::Device ? "dev" : "host", type,
                              offset(at.buffer) + at.bytes, buf(at.buffer).name,
                              at.bytes ? fmt::format(" + {}", at.bytes) : "");
    return name;
  }
  std::string let_bytes(Body& body, const std::string& name, At at) const {
    return let(body, name, "std::byte", at);
  }
  // Appends a statement (with the body's indent and a newline) to the calls.
  template <class... Args>
  void call(Body& body, fmt::format_string<Args...> f, Args&&... args) const {
    body.calls +=
        wrap_line(body.indent + fmt::format(f, std::forward<Args>(args)...), "    ") + "\n";
  }

  // ---- layers and slots -----------------------------------------------------
  const FlatTensor& tensor(int unit, const std::string& name) const {
    for (const FlatTensor& t : s_.units.units[static_cast<size_t>(unit)].tensors)
      if (t.name == name) return t;
    throw std::logic_error(fmt::format("emit: unit {} has no tensor {}", unit, name));
  }
  // The family's runtime prefix ("gpt2": gpt2_block_forward, runtime/gpt2.h).
  std::string fam() const { return std::string(to_string(model_.family)); }
  const model::ParamLayout& layout() const { return param_layout(model_.family); }
  // Element offset of a layer's first tensor; checks the block's tensors lie
  // where the family runtime's params_at finds them (model/gpt2.h, model/llama.h).
  int64_t block_offset(int unit, int64_t block) const {
    const std::string p = fmt::format(fmt::runtime(layout().block_prefix), block);
    const model::Table<model::Tensor> layout = this->layout().block;
    const model::Dims dims = layout_dims(model_, act_);
    std::vector<const FlatTensor*> ts;
    for (const FlatTensor& t : s_.units.units[static_cast<size_t>(unit)].tensors)
      if (t.name.rfind(p, 0) == 0) ts.push_back(&t);
    bool as_laid_out = ts.size() == layout.count;
    for (size_t i = 0; as_laid_out && i < ts.size(); ++i)
      as_laid_out =
          ts[i]->name == p + layout[i].hf_name &&
          ts[i]->offset_elems - ts[0]->offset_elems == model::offset_elems(layout, i, dims);
    if (!as_laid_out)
      throw std::logic_error(fmt::format(
          "emit: block {} tensors are not laid out as the {} layout table lays them out", block,
          fam()));
    return ts.front()->offset_elems;
  }
  At param(int params_buf, int unit, const std::string& name) const {
    return {params_buf, tensor(unit, name).offset_elems * pbytes_};
  }
  At grad(int grads_buf, int unit, const std::string& name) const {
    return {grads_buf, tensor(unit, name).offset_elems * rbytes_};
  }
  std::string head_weight_name() const {
    return model_.tie_embeddings ? layout().embed[0].hf_name : layout().head[0].hf_name;
  }
  // Declares a named pointer to each tensor of a table (embed, final norm) in
  // `buffer` (params, or grads as "d" + name) and returns them as arguments.
  std::string table_args(Body& b, model::Table<model::Tensor> table, int buffer, int unit,
                         bool grads) const {
    std::vector<std::string> names;
    for (const model::Tensor& t : table)
      names.push_back(
          grads ? let(b, fmt::format("d{}", t.name), "grad_t", grad(buffer, unit, t.hf_name))
                : let(b, t.name, "param_t", param(buffer, unit, t.hf_name)));
    return fmt::format("{}", fmt::join(names, ", "));
  }
  // llama: the rotary tables a block's forward and backward read ("" for gpt2).
  std::string rope_arg(Body& b, const Op& op) const {
    const int tables = op.operand(Role::RopeTables);
    if (tables < 0) return "";
    call(b, "const llama_rope rope = llama_rope_at({}, kDims);",
         let(b, "rope_tables", "float", {tables, 0}));
    return "rope, ";
  }
  int head_unit(const Segment& seg) const {
    return model_.tie_embeddings ? 0 : seg.unit;  // tied: the embedding lives in the root
  }
  bool recomputes(const Segment& seg) const {
    return spec_.parallel.recompute == Recompute::Block && seg.unit != 0;
  }
  // Byte offset of each layer's slot in its group's saved layout (a
  // segment's own, unless sub-block units split a block across segments:
  // Segment::group), one more entry after the last: where the next slot
  // would start. A later piece of a split block points at its first piece's slot.
  std::vector<int64_t> slot_offsets(const Segment& seg) const {
    int64_t at = 0;
    std::map<int64_t, int64_t> block_slot;  // split block -> its slot
    for (int i : group_segments(s_.units, seg.group)) {
      const Segment& other = s_.units.segments[static_cast<size_t>(i)];
      std::vector<int64_t> off;
      for (const LayerId& l : other.layers) {
        if (l.kind == LayerId::Kind::Block && l.piece == 0) block_slot[l.block] = at;
        off.push_back(l.kind == LayerId::Kind::Block && l.piece > 0 ? block_slot.at(l.block) : at);
        at += layer_saved_bytes(model_, l, act_);
      }
      off.push_back(at);
      if (&other == &seg) return off;
    }
    throw std::logic_error("emit: a segment outside its group");
  }
  // The group's first layer: under recompute its input is the group's saved buffer.
  const LayerId& group_first_layer(const Segment& seg) const {
    return s_.units.segments[static_cast<size_t>(seg.group)].layers.front();
  }
  // Whether layer l (of a segment of this group) reads the group's input:
  // it is, or is a piece of, the group's first block.
  bool reads_group_input(const Segment& seg, const LayerId& l) const {
    const LayerId& first = group_first_layer(seg);
    return l.kind == LayerId::Kind::Block && first.kind == LayerId::Kind::Block &&
           l.block == first.block;
  }
  // The run of pieces of one block from layer k of a segment: [k, end).
  static size_t piece_run_end(const Segment& seg, size_t k) {
    const LayerId& l = seg.layers[k];
    size_t end = k + 1;
    if (l.kind != LayerId::Kind::Block || l.whole()) return end;
    while (end < seg.layers.size() && seg.layers[end].kind == LayerId::Kind::Block &&
           seg.layers[end].block == l.block && !seg.layers[end].whole())
      ++end;
    return end;
  }
  // ", block_pieces{first, end}" for a run of pieces, "" for a whole block.
  static std::string pieces_arg(const Segment& seg, size_t k, size_t end) {
    const LayerId& l = seg.layers[k];
    if (l.whole()) return "";
    return fmt::format(", block_pieces{{{}, {}}}", l.piece, seg.layers[end - 1].piece + 1);
  }
  // Where a layer's saved input sits inside its slot. The head saves none:
  // it reads the final norm's output, and forward writes nothing for it.
  int64_t input_field(const LayerId& l) const {
    if (l.kind == LayerId::Kind::Head) return 0;
    return saved_field_offset_bytes(model_, l, act_, "input");
  }
  // Where segment i's first layer reads its input in the saved activations
  // acts (its own slot, or the whole buffer under recompute).
  At segment_input(int seg_index, int acts) const {
    const Segment& seg = s_.units.segments[static_cast<size_t>(seg_index)];
    if (acts < 0) return {};  // it continues this segment's block: nothing to hand over
    if (recomputes(seg)) return {acts, 0};
    return {acts, input_field(seg.layers.front())};
  }
  const Segment& segment(const Op& op) const {
    return s_.units.segments[static_cast<size_t>(op.segment)];
  }
  // Each layer that writes code (final_norm is written with the head) gets
  // its own scope when a segment has several.
  static bool writes_code(const LayerId& l) { return l.kind != LayerId::Kind::FinalNorm; }
  static bool scoped(const Segment& seg) {
    int calls = 0;
    for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k))
      calls += writes_code(seg.layers[k]);
    return calls > 1;
  }
  static Body layer_body(bool scoped) { return Body{scoped ? "    " : "  ", "", ""}; }
  static std::string close(const Body& b, bool scoped, const std::string& what) {
    return scoped ? fmt::format("  {{  // {}\n{}  }}\n", what, b.text()) : b.text();
  }

  void embed_forward(Body& b, const Op& op, int params, At out) const {
    const int inputs = op.operand(Role::Inputs);
    const int u = segment(op).unit;
    const std::string tokens = let(b, "tokens", "int32_t", {inputs, 0});
    const std::string targets = let(b, "targets", "int32_t", {inputs, targets_offset_bytes(act_)});
    const std::string weights = table_args(b, layout().embed, params, u, false);
    const std::string dst = let(b, "out", "param_t", out);
    call(b, "step_fill_inputs(c, {}, {}, {}{});", op.micro_batch, tokens, targets, gtail());
    call(b, "{}_embed_forward<param_t>({}, {}, {}, kDims{});", fam(), dst, tokens, weights,
         gtail());
  }

  // A whole block's first tensor in `buffer`, declared (the carving's base);
  // "" for pieces, or where custom layers make the block's tensors other
  // than its family's layout (they are then set by name).
  std::string block_base(Body& b, const Segment& seg, size_t k, int buffer, bool grads) const {
    const LayerId& l = seg.layers[k];
    if (!l.whole() || custom_model()) return "";
    return let(b, grads ? "dweights" : "weights", grads ? "grad_t" : "param_t",
               {buffer, block_offset(seg.unit, l.block) * (grads ? rbytes_ : pbytes_)});
  }

  // ---- custom layers (DESIGN §9) ----------------------------------------------
  // Red zones after custom arrays (--check), as the op bodies bind them:
  // buffer, offset, bytes, the array's name.
  mutable std::set<std::tuple<int, int64_t, int64_t, std::string>> inner_red_zones_;
  bool custom_model() const { return !model_.custom.empty(); }

  // What one call of a block's forward or backward covers: a run of its
  // family's pieces [family_first, family_end), or one custom layer (custom >= 0).
  struct PieceCall {
    int family_first = 0, family_end = 0;
    int custom = -1;
  };
  // Layers [k, end) of a segment (a whole block, or a run of its pieces) as
  // calls in forward order.
  std::vector<PieceCall> piece_calls(const Segment& seg, size_t k, size_t end) const {
    const std::vector<BlockPiece> pieces = model_block_pieces(model_);
    const LayerId& l = seg.layers[k];
    const int first = l.whole() ? 0 : l.piece;
    const int last = l.whole() ? static_cast<int>(pieces.size()) : seg.layers[end - 1].piece + 1;
    std::vector<PieceCall> calls;
    for (int i = first; i < last; ++i) {
      const BlockPiece& p = pieces[static_cast<size_t>(i)];
      if (p.custom < 0 && !calls.empty() && calls.back().custom < 0 &&
          calls.back().family_end == p.family_first)
        calls.back().family_end = p.family_end;
      else
        calls.push_back({p.family_first, p.family_end, p.custom});
    }
    return calls;
  }

  // ModelSpec::custom's entry `custom`.
  const CustomLayerSpec& custom_spec(int custom) const {
    return model_.custom[static_cast<size_t>(custom)];
  }

  // Where row `name` of a layout table starts in its slot (a logic error if absent).
  int64_t row_offset(const model::Table<model::Field>& t, const std::string& name) const {
    return model::offset_bytes(t, model::index_of(t, name.c_str()), layout_dims(model_, act_), N_,
                               pbytes_);
  }

  // The family's saved struct `saved` over the slot: carved by the family's
  // runtime (its own layout), or with custom layers set row by row from the
  // model's layout (planner/Activations.h's block_saved_layout).
  // `s`: the slot's declared name ("" with custom layers).
  void block_saved(Body& b, const std::string& s, At slot) const {
    if (!custom_model()) {
      call(b, "auto saved = {}_block_saved_at<param_t>({}, kDims);", fam(), s);
      return;
    }
    call(b, "{}_block_saved<param_t> saved{{}};", fam());
    const LayoutTable layout = block_saved_layout(model_);
    const model::Table<model::Field> t = layout.table();
    const model::Dims d = layout_dims(model_, act_);
    for (const model::Field& f : t) {
      const std::string name = f.name;
      if (name.find('.') != std::string::npos || !model::present(f, d)) continue;
      const At at{slot.buffer, slot.bytes + row_offset(t, name)};
      call(b, "saved.{} = {};", name,
           let(b, "saved_" + name, f.elem == model::Elem::Fp32 ? "float" : "param_t", at));
    }
  }

  // The custom layer of `custom` as a local named after its module, its
  // hyper-parameters, parameters (and with `grads` their gradients) and
  // saved arrays set; with `scratch` (backward) its scratch arrays too.
  std::string custom_layer_local(Body& b, const Segment& seg, int64_t block, int custom, int params,
                                 int grads, At slot, int scratch) const {
    const CustomLayerSpec& c = custom_spec(custom);
    const std::string var = "layer_" + c.module;
    call(b, "{}<param_t, grad_t> {}{{}};  // {} (custom, {})", c.layer, var, c.module,
         header_name(c.header));
    for (const CustomLayerSpec::Hyper& h : c.hyper)
      call(b, "{}.hyper.{} = {};", var, h.name, h.value);
    const std::string prefix =
        fmt::format(fmt::runtime(layout().block_prefix), block) + c.module + ".";
    for (const CustomTensorSpec& t : c.params) {
      call(b, "{}.{}.value = {};", var, t.name,
           let(b, c.module + "_" + t.name, "param_t", param(params, seg.unit, prefix + t.name)));
      if (grads >= 0)
        call(b, "{}.{}.grad = {};", var, t.name,
             let(b, "d" + c.module + "_" + t.name, "grad_t",
                 grad(grads, seg.unit, prefix + t.name)));
    }
    const LayoutTable saved = block_saved_layout(model_);
    for (const CustomArraySpec& a : c.saved) {
      const At at{slot.buffer, slot.bytes + row_offset(saved.table(), c.module + "." + a.name)};
      call(b, "{}.{}.data = {};", var, a.name,
           let(b, c.module + "_" + a.name, a.fp32 ? "float" : "param_t", at));
      note_red_zone(saved.table(), slot.buffer, slot.bytes, c.module, a, prefix + a.name);
    }
    if (scratch >= 0) {
      const LayoutTable s = backward_scratch_layout(model_);
      for (const CustomArraySpec& a : c.scratch) {
        call(b, "{}.{}.data = {};", var, a.name,
             let(b, c.module + "_" + a.name, a.fp32 ? "float" : "param_t",
                 {scratch, row_offset(s.table(), c.module + "." + a.name)}));
        note_red_zone(s.table(), scratch, 0, c.module, a, c.module + "." + a.name);
      }
    }
    return var;
  }

  // With red zones (--check): the zone after a custom array, from its end to
  // the end of its red_zone row, for the program's table.
  void note_red_zone(const model::Table<model::Field>& t, int buffer, int64_t base,
                     const std::string& module, const CustomArraySpec& a,
                     const std::string& name) const {
    if (!model_.custom_red_zones) return;
    const int64_t elem = a.fp32 ? 4 : pbytes_;
    const int64_t begin = base + row_offset(t, module + "." + a.name) + N_ * a.per_token * elem;
    const int64_t end = base + row_offset(t, custom_red_zone_row(module, a.name)) +
                        N_ * kCustomRedZonePerToken * elem;
    inner_red_zones_.insert({buffer, begin, end - begin, name});
  }

  // The backward scratch's custom_out: where a custom layer writes what is
  // not wanted (a recompute's output, a backward's d(input) before it is added).
  At custom_out(int scratch) const {
    return {scratch, row_offset(backward_scratch_layout(model_).table(), "custom_out")};
  }

  // A header's name as the step includes it (its directory is on the
  // compiler's include path: emit/Build.h).
  static std::string header_name(const std::string& header) {
    const size_t slash = header.rfind('/');
    return slash == std::string::npos ? header : header.substr(slash + 1);
  }

  // The family module a custom layer stands in for (its input and residual rows).
  const model::Module& module_of(int custom) const {
    return *replaceable_module(model_.family, custom_spec(custom).module);
  }

  // A block's tensors in `buffer` (params, or grads when `grads`) as the
  // family's struct named `var`: carved from `base` for a whole block of its
  // family's layout, else the tensors of the family pieces in `calls` set
  // by name (the others null).
  void block_tensors(Body& b, const Segment& seg, size_t k, const std::vector<PieceCall>& calls,
                     int buffer, bool grads, const std::string& var,
                     const std::string& base) const {
    const LayerId& l = seg.layers[k];
    const std::string type = grads ? "grad_t" : "param_t";
    const int64_t elem = grads ? rbytes_ : pbytes_;
    const std::string what = grads ? "grads" : "params";
    if (!base.empty()) {
      call(b, "auto {} = {}_block_{}_at<{}>({}, kDims);", var, fam(), what, type, base);
      return;
    }
    call(b, "{}_block_{}<{}> {}{{}};", fam(), what, type, var);
    const std::string prefix = fmt::format(fmt::runtime(layout().block_prefix), l.block);
    for (const PieceCall& pc : calls) {
      if (pc.custom >= 0) continue;
      for (int f = pc.family_first; f < pc.family_end; ++f) {
        const model::Piece& piece = layout().pieces[static_cast<size_t>(f)];
        for (int t = piece.first_tensor; t < piece.first_tensor + piece.tensors; ++t) {
          const model::Tensor& row = layout().block[static_cast<size_t>(t)];
          const int64_t at = tensor(seg.unit, prefix + row.hf_name).offset_elems * elem;
          call(b, "{}.{} = {};", var, row.name,
               let(b, fmt::format("{}{}", grads ? "d" : "", row.name), type, {buffer, at}));
        }
      }
    }
  }

  // ", block_pieces{first, end}" for a run of family pieces, "" for a whole
  // block of a model without custom layers.
  std::string family_pieces_arg(const Segment& seg, size_t k, size_t end,
                                const PieceCall& pc) const {
    if (!custom_model()) return pieces_arg(seg, k, end);
    return fmt::format(", block_pieces{{{}, {}}}", pc.family_first, pc.family_end);
  }

  // Layers [k, end) of the op's segment: a block, or a run of its pieces.
  // `input`: the buffer the block reads its input from when it is not in its slot (-1).
  void block_forward(Body& b, const Op& op, size_t k, size_t end, int params, At slot, int input,
                     At out) const {
    const Segment& seg = segment(op);
    const std::vector<PieceCall> calls = piece_calls(seg, k, end);
    const std::string s = custom_model() ? "" : let_bytes(b, "slot", slot);
    const std::string in = let(b, "input", "param_t", {input, 0});
    const std::string w = block_base(b, seg, k, params, false);
    const std::string dst = let(b, "out", "param_t", out);
    block_saved(b, s, slot);
    if (input >= 0) call(b, "saved.input = {};", in);
    block_tensors(b, seg, k, calls, params, false, "params", w);
    const std::string rope = rope_arg(b, op);
    for (const PieceCall& pc : calls) {
      if (pc.custom < 0) {
        // The family's last piece writes the block's output, or the input
        // row of a layer added after it.
        const bool last = pc.family_end == block_piece_count_family();
        const int added = added_custom_layer();
        const std::string family_out = !last       ? "nullptr"
                                       : added < 0 ? dst
                                                   : added_input(b, added, slot);
        call(b, "{}_block_forward<param_t>({}, params, saved, {}kDims, {}{});", fam(), family_out,
             rope, ws(), family_pieces_arg(seg, k, end, pc));
        continue;
      }
      custom_forward(b, op, seg.layers[k].block, pc.custom, params, slot,
                     out.buffer >= 0 ? dst : "");
    }
  }

  // A custom layer's forward: y = layer(x) into its output (a saved row, or
  // the block's output `dst`; "" in a recompute, which keeps only the saved
  // rows), then a residual branch adds its residual row.
  void custom_forward(Body& b, const Op& op, int64_t block, int custom, int params, At slot,
                      const std::string& dst) const {
    const Segment& seg = segment(op);
    const std::string layer = custom_layer_local(b, seg, block, custom, params, -1, slot, -1);
    const model::Module& m = module_of(custom);
    const std::string x =
        m.added() ? added_input(b, custom, slot) : "saved." + std::string(m.input);
    const bool kept = m.output || !dst.empty();
    const std::string y =
        m.output ? "saved." + std::string(m.output)
        : kept   ? dst
                 : let(b, "unused_out", "param_t", custom_out(op.operand(Role::Scratch)));
    call(b, "{}.{}({}, {}, kDims.N(), {});", layer, entry_point("forward"), x, y, layer_context());
    if (!kept) return;
    if (m.residual)
      call(b, "residual_forward({}, {}, saved.{}, kDims.N() * kDims.C{});", y, y, m.residual,
           gtail());
    else if (m.added())
      call(b, "residual_forward({}, {}, {}, kDims.N() * kDims.C{});", y, y, x, gtail());
  }

  // A custom layer's entry point for the target: forward, or forward_cuda.
  std::string entry_point(const std::string& name) const {
    return on_gpu() ? name + "_cuda" : name;
  }
  // What it gets last (layers/fsdpgen_layer.h, layers/fsdpgen_layer_cuda.h).
  std::string layer_context() const {
    return on_gpu() ? fmt::format("fsdpgen::layer::Cuda{{{}}}", gpu_exec())
                    : fmt::format("fsdpgen::layer::Cpu{{{}}}", ws());
  }

  // The model's added custom layer (model/layout.h's Module::added), or -1.
  int added_custom_layer() const {
    for (size_t i = 0; i < model_.custom.size(); ++i)
      if (module_of(static_cast<int>(i)).added()) return static_cast<int>(i);
    return -1;
  }

  // An added layer's input row in the slot, declared once in a body.
  std::string added_input(Body& b, int custom, At slot) const {
    const std::string module = custom_spec(custom).module;
    const std::string name = module + "_x";
    if (b.decls.find(" " + name + " = ") != std::string::npos) return name;
    const LayoutTable saved = block_saved_layout(model_);
    return let(b, name, "param_t",
               {slot.buffer, slot.bytes + row_offset(saved.table(), module + ".x")});
  }

  // ", tensor_init::normal, 0.02f" for a custom layer's tensor (its header's
  // initialisation), "" for the others (initialized by name).
  std::string tensor_init_fields(const std::string& name) const {
    for (const CustomLayerSpec& c : model_.custom)
      for (const CustomTensorSpec& t : c.params) {
        const std::string leaf = "." + c.module + "." + t.name;
        if (name.size() < leaf.size() || name.compare(name.size() - leaf.size(), leaf.size(), leaf))
          continue;
        switch (t.init) {
          case CustomTensorSpec::Init::Normal:
            return fmt::format(", tensor_init::normal, {}f", cpp_double(t.std));
          case CustomTensorSpec::Init::Ones:
            return ", tensor_init::ones";
          case CustomTensorSpec::Init::Zeros:
            return ", tensor_init::zeros";
        }
      }
    return "";
  }

  // The family's piece count (a block's output is written by its last).
  int block_piece_count_family() const { return static_cast<int>(layout().pieces.count); }

  void head_forward(Body& b, const Op& op, int params, At slot) const {
    const Segment& seg = segment(op);
    const int logits = op.operand(Role::Logits);
    const std::string s = let_bytes(b, "slot", slot);
    const std::string lg = let(b, "logits", "param_t", {logits, 0});
    const std::string losses =
        let(b, "losses", "float", {logits, losses_offset_bytes(model_, act_)});
    const std::string targets =
        let(b, "targets", "int32_t", {op.operand(Role::Inputs), targets_offset_bytes(act_)});
    const std::string norm = table_args(b, layout().final_norm, params, seg.unit, false);
    const std::string head_w =
        let(b, "head_w", "param_t", param(params, head_unit(seg), head_weight_name()));
    call(b, "auto saved = {}_final_norm_saved_at<param_t>({}, kDims);", fam(), s);
    call(b, "{}_head_forward<param_t>({}, {}, {}, {}, {}, saved, kDims, {}, {});", fam(), lg,
         losses, targets, norm, head_w, on_gpu() ? "cuda_dloss_scale(c)" : "c.dloss_scale", ws());
    call(b, "step_add_losses(c, {}, {}{});", losses, N_, gtail());
  }

  // Forward of a segment's layers into the saved region `saved` (acts, or
  // scratch under recompute). `next` is where the last layer's output goes
  // (no buffer to skip it: recompute rebuilds only what backward reads).
  std::string forward_body(const Op& op, int params, int saved, int acts_in, At next) const {
    const Segment& seg = segment(op);
    const std::vector<int64_t> slots = slot_offsets(seg);
    const bool scope = scoped(seg);
    std::string out;
    for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k)) {
      const LayerId& l = seg.layers[k];
      if (!writes_code(l)) continue;
      const size_t end = piece_run_end(seg, k);
      const bool last = end == seg.layers.size();
      At dst = last ? next : At{saved, slots[end] + input_field(seg.layers[end])};
      if (l.kind == LayerId::Kind::Block && !writes_block_output(model_, seg.layers[end - 1]))
        dst = {};
      Body b = layer_body(scope);
      switch (l.kind) {
        case LayerId::Kind::Embed:
          embed_forward(b, op, params, dst);
          out += close(b, scope, "embed");
          break;
        case LayerId::Kind::Block:
          block_forward(b, op, k, end, params, {saved, slots[k]},
                        reads_group_input(seg, l) && saved != acts_in ? acts_in : -1, dst);
          out += close(b, scope, layer_name(model_, l));
          break;
        case LayerId::Kind::Head:
          head_forward(b, op, params, {saved, slots[k - 1]});
          out += close(b, scope, "final_norm, head and loss");
          break;
        case LayerId::Kind::FinalNorm:
          break;
      }
    }
    return out;
  }

  // Where segment i's output goes in forward: the next segment's input.
  At next_input(const Op& op) const {
    if (op.segment + 1 >= static_cast<int>(s_.units.segments.size())) return {};
    return segment_input(op.segment + 1, op.operand(Role::NextInput));
  }

  // Where a segment's layers save what backward reads: its saved
  // activations, or under recompute = block the scratch.
  int saved_of(const Op& op) const {
    return recomputes(segment(op)) ? op.operand(Role::RecomputeScratch) : op.operand(Role::Saved);
  }

  std::string forward(const Op& op) const {
    return forward_body(op, op.operand(Role::Params), saved_of(op), op.operand(Role::Saved),
                        next_input(op));
  }

  std::string recompute(const Op& op) const {
    return forward_body(op, op.operand(Role::Params), saved_of(op), op.operand(Role::Saved), {});
  }

  void head_backward(Body& b, const Segment& seg, int params, int grads, int logits,
                     At slot) const {
    const std::string s = let_bytes(b, "slot", slot);
    const std::string dnorm = table_args(b, layout().final_norm, grads, seg.unit, true);
    const std::string dhead_w =
        let(b, "dhead_w", "grad_t", grad(grads, head_unit(seg), head_weight_name()));
    const model::Tensor& norm_weight = layout().final_norm[0];  // backward reads the weight only
    const std::string norm_w =
        let(b, norm_weight.name, "param_t", param(params, seg.unit, norm_weight.hf_name));
    const std::string head_w =
        let(b, "head_w", "param_t", param(params, head_unit(seg), head_weight_name()));
    const std::string lg = let(b, "logits", "param_t", {logits, 0});
    call(b, "auto saved = {}_final_norm_saved_at<param_t>({}, kDims);", fam(), s);
    call(b, "{}_head_backward<param_t, grad_t>({}, {}, {}, {}, {}, saved, scratch, kDims, {});",
         fam(), dnorm, dhead_w, norm_w, head_w, lg, ws());
  }

  void block_backward(Body& b, const Op& op, size_t k, size_t end, int params, int grads, At slot,
                      int input) const {
    const Segment& seg = segment(op);
    const std::vector<PieceCall> calls = piece_calls(seg, k, end);
    const std::string s = custom_model() ? "" : let_bytes(b, "slot", slot);
    const std::string in = let(b, "input", "param_t", {input, 0});
    const std::string w = block_base(b, seg, k, params, false);
    const std::string dw = block_base(b, seg, k, grads, true);
    block_saved(b, s, slot);
    if (input >= 0) call(b, "saved.input = {};", in);
    block_tensors(b, seg, k, calls, params, false, "params", w);
    block_tensors(b, seg, k, calls, grads, true, "grads", dw);
    const std::string rope = rope_arg(b, op);
    for (size_t x = calls.size(); x-- > 0;) {
      const PieceCall& pc = calls[x];
      if (pc.custom < 0) {
        call(b, "{}_block_backward<param_t, grad_t>(grads, params, saved, scratch, {}kDims, {}{});",
             fam(), rope, ws(), family_pieces_arg(seg, k, end, pc));
        continue;
      }
      custom_backward(b, op, seg.layers[k].block, pc.custom, params, grads, slot);
    }
  }

  // A custom layer's backward: d(output) is in dres (a residual branch's,
  // which is also its residual row's share) or dtmp (a norm's); d(input) goes
  // to dtmp for the norm before it, or through custom_out into dres.
  void custom_backward(Body& b, const Op& op, int64_t block, int custom, int params, int grads,
                       At slot) const {
    const Segment& seg = segment(op);
    const int scratch = op.operand(Role::Scratch);
    const std::string layer =
        custom_layer_local(b, seg, block, custom, params, grads, slot, scratch);
    const model::Module& m = module_of(custom);
    const std::string x =
        m.added() ? added_input(b, custom, slot) : "saved." + std::string(m.input);
    const std::string dy = m.residual || m.added() ? "scratch.dres" : "scratch.dtmp";
    const std::string dx = m.dinput_in_dtmp ? "scratch.dtmp"
                                            : let(b, custom_spec(custom).module + "_dx", "param_t",
                                                  custom_out(scratch));
    call(b, "{}.{}({}, {}, {}, kDims.N(), {});", layer, entry_point("backward"), x, dy, dx,
         layer_context());
    if (!m.dinput_in_dtmp)
      call(b, "residual_forward(scratch.dres, scratch.dres, {}, kDims.N() * kDims.C{});", dx,
           gtail());
  }

  void embed_backward(Body& b, const Op& op, int grads) const {
    const int u = segment(op).unit;
    const std::string dweights = table_args(b, layout().embed, grads, u, true);
    const std::string tokens = let(b, "tokens", "int32_t", {op.operand(Role::Inputs), 0});
    call(b, "{}_embed_backward<param_t, grad_t>({}, {}, scratch, kDims{});", fam(), dweights,
         tokens, gtail());
  }

  std::string backward(const Op& op) {
    const Segment& seg = segment(op);
    const int params = op.operand(Role::Params);
    const int acts = op.operand(Role::Saved);
    const int saved = saved_of(op);
    const int grads = op.operand(Role::Grads);
    const std::vector<int64_t> slots = slot_offsets(seg);
    Body top;
    if (grads >= 0 && zeroed_.insert(grads).second) {
      const std::string g = let_bytes(top, "unit_grads", {grads, 0});
      call(top, "tensor_zero({}, {}{});  // the first write of {}", g, buf(grads).bytes, gtail(),
           buf(grads).name);
    }
    const std::string d = let_bytes(top, "act_grads", {op.operand(Role::Scratch), 0});
    call(top, "auto scratch = {}_backward_scratch_at<param_t>({}, kDims);", fam(), d);
    std::string out = top.text();
    const bool scope = scoped(seg);
    std::vector<size_t> starts;  // each layer's, a run of pieces once
    for (size_t k = 0; k < seg.layers.size(); k = piece_run_end(seg, k))
      starts.push_back(k);
    for (size_t x = starts.size(); x-- > 0;) {
      const size_t r = starts[x];
      const LayerId& l = seg.layers[r];
      Body b = layer_body(scope);
      switch (l.kind) {
        case LayerId::Kind::Head:
          head_backward(b, seg, params, grads, op.operand(Role::Logits), {saved, slots[r - 1]});
          out += close(b, scope, "head and final_norm");
          break;
        case LayerId::Kind::FinalNorm:
          break;
        case LayerId::Kind::Block:
          block_backward(b, op, r, piece_run_end(seg, r), params, grads, {saved, slots[r]},
                         reads_group_input(seg, l) && saved != acts ? acts : -1);
          out += close(b, scope, layer_name(model_, l));
          break;
        case LayerId::Kind::Embed:
          embed_backward(b, op, grads);
          out += close(b, scope, "embed");
          break;
      }
    }
    return out;
  }

  // ---- communication and the optimizer -----------------------------------------
  // Declares the op's communicator as `comm` and returns the name.
  std::string comm(Body& b, const Op& op) const {
    b.decls += fmt::format("{}{} comm = {}(c, stream_id::{}, comm_group::{});\n", b.indent,
                           on_gpu() ? "const gpu_comm&" : "MPI_Comm",
                           on_gpu() ? "cuda_op_comm" : "op_comm", to_string(op.stream),
                           to_string(op.group));
    return "comm";
  }
  const FlatUnit& unit(int u) const { return s_.units.units[static_cast<size_t>(u)]; }
  std::string reduce_dtype() const { return dtype_enum(reduce_); }
  std::string dtype_of(int buffer, int64_t elems) const {
    return buf(buffer).bytes / elems == 4 ? "dtype_id::fp32" : dtype_enum(half_);
  }
  // A later micro-batch adds to the gradient shard; the first (or the only reduction) sets it.
  bool accumulates(const Op& op) const {
    return op.micro_batch > 0 && spec_.parallel.accumulate.reduce == AccumulateReduce::Every;
  }

  std::string all_gather(const Op& op) const {
    Body b;
    const std::string c = comm(b, op);
    const std::string shard = let_bytes(b, "shard", {op.operand(Role::Src), 0});
    const std::string params = let_bytes(b, "params", {op.operand(Role::Dst), 0});
    call(b, "comm_all_gather({}, {}, {}, {}{});", c, shard, params,
         unit(op.unit).shard_elems * pbytes_, gtail());
    return b.text();
  }

  std::string reduce_scatter(const Op& op) const {
    const int64_t n = unit(op.unit).shard_elems;
    const int staging = op.operand(Role::Staging);
    const int shard = op.operand(Role::GradShard);
    Body b;
    const std::string c = comm(b, op);
    const std::string grads = let_bytes(b, "grads", {op.operand(Role::Grads), 0});
    const std::string stage = let_bytes(b, "staging", {staging, 0});
    const std::string dst = let_bytes(b, "shard", {shard, 0});
    call(b, "comm_reduce_scatter({}, {}, {}, {}, {}{});", c, grads, staging >= 0 ? stage : dst, n,
         reduce_dtype(), gtail());
    if (staging >= 0 && shard >= 0)
      convert(b, shard, dst, dtype_of(shard, n), stage, reduce_dtype(), n, accumulates(op));
    return b.text();
  }

  std::string all_reduce(const Op& op) const {
    Body b;
    const std::string c = comm(b, op);
    if (op.is_loss_reduce()) {  // the step's loss, for the guard
      call(b, "step_reduce_loss(c, {}{});", c, gtail());
      return b.text();
    }
    if (op.unit < 0) {  // the gradient norm's partial sums
      b.decls += fmt::format("  float* partial = {};\n", norm_partial());
      call(b, "comm_all_reduce({}, partial, partial, 1, dtype_id::fp32{});", c, gtail());
      return b.text();
    }
    const FlatUnit& f = unit(op.unit);
    const int grads = op.operand(Role::Grads);
    const int shard = op.operand(Role::GradShard);
    if (grads < 0) {
      // Hybrid: the accumulated shard across replicas, in the reduce dtype.
      const std::string s = let_bytes(b, "shard", {shard, 0});
      const std::string t = dtype_of(shard, f.shard_elems);
      const int64_t n = f.shard_elems;
      if (t == reduce_dtype()) {
        call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, s, s, n, t, gtail());
        return b.text();
      }
      call(b, "tensor_narrow_in_place({}, {}, {}{});  // fp32 accumulator -> {} for the reduction",
           s, n, reduce_dtype(), gtail(), to_string(reduce_));
      call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, s, s, n, reduce_dtype(), gtail());
      call(b, "tensor_widen_in_place({}, {}, {}{});", s, n, reduce_dtype(), gtail());
      return b.text();
    }
    // no_shard: the whole unit's gradient across replicas.
    const int64_t n = f.padded_elems;
    const std::string t = dtype_of(shard, n);
    const std::string g = let_bytes(b, "grads", {grads, 0});
    const std::string s = let_bytes(b, "shard", {shard, 0});
    // (On a GPU, into a shard in host memory (offload): in place, then a copy.)
    if (t == reduce_dtype() && spec_.parallel.accumulate.micro_batches == 1 &&
        !(on_gpu() && buf(shard).space == MemSpace::Host)) {
      call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, g, s, n, t, gtail());
      return b.text();
    }
    call(b, "comm_all_reduce({}, {}, {}, {}, {}{});", c, g, g, n, reduce_dtype(), gtail());
    convert(b, shard, s, t, g, reduce_dtype(), n, accumulates(op));
    return b.text();
  }

  // Bytes from Src to Dst on the op's stream: a host shard to the device
  // (offload), or activations between device and host.
  std::string copy_bytes(const Op& op) const {
    Body b;
    const std::string src = let_bytes(b, "src", {op.operand(Role::Src), 0});
    const std::string dst = let_bytes(b, "dst", {op.operand(Role::Dst), 0});
    if (on_gpu())
      call(b, "cuda_copy({}, {}, {}, {});", dst, src, op.payload_bytes, gpu_exec());
    else
      call(b, "std::memcpy({}, {}, {});", dst, src, op.payload_bytes);
    return b.text();
  }

  // Offload: a reduce-scatter's output (accumulated over micro-batches), or
  // at world 1 the step's unsharded fp32 gradients, into the host shard; or
  // (an op of a segment) a block's saved input into host memory, byte for byte.
  std::string copy_d2h(const Op& op) const {
    if (op.segment >= 0) return copy_bytes(op);
    const int64_t n = unit(op.unit).shard_elems;
    const int shard = op.operand(Role::Dst);
    Body b;
    const std::string src = let_bytes(b, "src", {op.operand(Role::Src), 0});
    const std::string dst = let_bytes(b, "shard", {shard, 0});
    // A micro-batch's reduce-scatter output accumulates; the step's gradients
    // (one copy, no micro-batch) set the shard.
    convert(b, shard, dst, dtype_of(shard, n), src, reduce_dtype(), n, accumulates(op));
    return b.text();
  }

  std::string grad_norm(const Op& op) const {
    Body b;
    for (const OpOperand& o : op.operands) {
      const int64_t elems = unit(buf(o.buffer).unit).shard_elems;
      const std::string g =
          let_bytes(b, fmt::format("grads_u{}", buf(o.buffer).unit), {o.buffer, 0});
      call(b, "step_add_grad_norm(c, {}, {}, {}{});", g, dtype_of(o.buffer, elems), elems, gtail());
    }
    return b.text();
  }

  std::string optimizer(const Op& op) const {
    Body b;
    const std::string shard = let_bytes(b, "shard", {op.operand(Role::Params), 0});
    const std::string master = let(b, "master", "float", {op.operand(Role::Master), 0});
    const std::string state = let(b, "state", "float", {op.operand(Role::OptimizerState), 0});
    const std::string grads = let_bytes(b, "grads", {op.operand(Role::GradShard), 0});
    call(b, "step_optimizer(c, {}, {}, {}, {}, {}{});", op.unit, shard, master, state, grads,
         gtail());
    return b.text();
  }

  std::string op_function(const Op& op) {
    if (op.kind == OpKind::Free) return "";
    host_ = cuda_ && runs_on_host(s_, op);
    uses_gpu_exec_ = false;
    std::string body;
    switch (op.kind) {
      case OpKind::AllGather:
        body = all_gather(op);
        break;
      case OpKind::Forward:
        body = forward(op);
        break;
      case OpKind::Recompute:
        body = recompute(op);
        break;
      case OpKind::Backward:
        body = backward(op);
        break;
      case OpKind::ReduceScatter:
        body = reduce_scatter(op);
        break;
      case OpKind::AllReduce:
        body = all_reduce(op);
        break;
      case OpKind::CopyH2D:
        body = copy_bytes(op);
        break;
      case OpKind::CopyD2H:
        body = copy_d2h(op);
        break;
      case OpKind::GradNorm:
        body = grad_norm(op);
        break;
      case OpKind::OptimizerStep:
        body = optimizer(op);
        break;
      case OpKind::Free:
        break;
    }
    if (uses_gpu_exec_) body = "  gpu_exec& g = gpu(c);  // the op's stream\n" + body;
    return fmt::format("// {}: {} on {}{}\nvoid op_{}(step_context& c) {{\n{}}}\n\n", op.id,
                       op.label(), to_string(op.stream),
                       host_ && op.stream != StreamId::Host ? ", run on the host" : "", op.id,
                       body);
  }

  // ---- tables ------------------------------------------------------------------
  std::string int_array(const std::string& name, const std::vector<int>& v) const {
    if (v.empty()) return "";
    std::vector<std::string> items;
    for (int x : v)
      items.push_back(std::to_string(x));
    return wrap_line(fmt::format("constexpr int {}[] = {{{}}};", name, fmt::join(items, ", ")),
                     "    ") +
           "\n";
  }

  // One kOps row: the op's planned fields (those that differ from
  // program_op's defaults), from which the trace writes the op's JSON.
  std::string op_row(const Op& op) const {
    std::vector<Init> f = {
        {"id", std::to_string(op.id)},
        {"stream", fmt::format("stream_id::{}", to_string(op.stream))},
        {"kind", fmt::format("op_kind::{}", kOpKindEnum[static_cast<int>(op.kind)])},
        {"label", cpp_string(op.label())}};
    auto add = [&](const char* name, int64_t v, int64_t dflt) {
      if (v != dflt) f.push_back({name, std::to_string(v)});
    };
    add("unit", op.unit, -1);
    add("segment", op.segment, -1);
    add("micro_batch", op.micro_batch, -1);
    if (op.group != CommGroup::None)
      f.push_back({"group", fmt::format("comm_group::{}", to_string(op.group))});
    add("group_size", op.group_size, 1);
    add("payload_bytes", op.payload_bytes, 0);
    add("sent_bytes", op.sent_bytes(), 0);
    add("memory_bytes", op.memory_bytes, 0);
    if (op.flops != 0) f.push_back({"flops", cpp_double(op.flops)});
    if (const double t = op_seconds(s_, op, hardware_); t > 0)
      f.push_back({"predicted_s", fmt::format("{:.3e}", t)});
    if (!op.deps.empty()) {
      f.push_back({"deps", fmt::format("kDeps{}", op.id)});
      add("dep_count", static_cast<int64_t>(op.deps.size()), 0);
    }
    f.push_back({"run", op.kind == OpKind::Free ? "op_free" : fmt::format("op_{}", op.id)});
    return "    " + braced(f, 4) + ",\n";
  }

  std::string tables() const {
    const ParallelSpec& par = spec_.parallel;
    const TrainSpec& t = spec_.train;
    std::string out;
    const std::string sched = schedule_text(s_);
    const uint64_t hash = fnv1a(print_spec(spec_) + sched + print_memory_plan(s_, m_));
    out += "constexpr const char* kScheduleText =\n" + cpp_string_lines(sched, "    ") + ";\n\n";

    out += "// Buffers: name, memory space, arena offset, bytes, persistent.\n";
    out += "constexpr program_buffer kBuffers[] = {\n";
    for (const Buffer& b : s_.buffers)
      out += wrap_line(fmt::format("    {{{}, memory_space::{}, {}, {}, {}}},", cpp_string(b.name),
                                   b.space == MemSpace::Device ? "device" : "host", offset(b.id),
                                   b.bytes, b.persistent),
                       "     ") +
             "\n";
    out += "};\n\n";
    if (!inner_red_zones_.empty()) {
      out += "// Red zones after custom layers' arrays (--check): buffer, offset, bytes, array.\n";
      out += "constexpr program_red_zone kInnerRedZones[] = {\n";
      for (const auto& [buffer, offset, bytes, name] : inner_red_zones_)
        out += fmt::format("    {{{}, {}, {}, {}}},\n", buffer, offset, bytes, cpp_string(name));
      out += "};\n\n";
    }
    if (m_.red_zone_bytes > 0) {  // fsdpgen build --check (runtime/red_zones.h)
      out += "// Buffers' lives (--check): the issue positions of their first use and Free.\n";
      out += "constexpr program_buffer_life kBufferLife[] = {\n";
      for (const Buffer& b : s_.buffers) {
        const Placement& pl = m_.placements[static_cast<size_t>(b.id)];
        out += fmt::format("    {{{}, {}}},  // {}\n", pl.first_op, pl.last_op, b.name);
      }
      out += "};\n\n";
    }

    out += "// Tensors: Hugging Face name, unit, offset in the unit's flat parameter, shape.\n";
    out += "constexpr program_tensor kTensors[] = {\n";
    std::vector<int> first(s_.units.units.size());
    int count = 0;
    for (const FlatUnit& f : s_.units.units) {
      first[static_cast<size_t>(f.index)] = count;
      for (const FlatTensor& ft : f.tensors) {
        out += wrap_line(
                   fmt::format("    {{{}, {}, {}, {}, {}{}}},", cpp_string(ft.name), f.index,
                               ft.offset_elems, ft.shape[0], ft.shape.size() > 1 ? ft.shape[1] : 0,
                               tensor_init_fields(ft.name)),
                   "     ") +
               "\n";
        ++count;
      }
    }
    out += "};\n\n";

    out += "// Units: name, params, padded and shard elements, first tensor and tensor count;\n";
    out +=
        "// buffers: param shard, master, optimizer state, grad shard; the grad shard's dtype.\n";
    out += "constexpr program_unit kUnits[] = {\n";
    for (const FlatUnit& f : s_.units.units) {
      auto persistent = [&](BufferKind k) {
        for (const Buffer& b : s_.buffers)
          if (b.kind == k && b.unit == f.index && b.persistent) return b.id;
        return -1;
      };
      int grad_shard = -1;
      int64_t grad_bytes = 4;
      for (const Buffer& b : s_.buffers)
        if (b.unit == f.index &&
            (b.kind == BufferKind::GradShard || (!comm_ && b.kind == BufferKind::UnshardedGrads))) {
          grad_bytes = b.bytes / f.shard_elems;
          if (b.persistent) grad_shard = b.id;
        }
      out += wrap_line(fmt::format("    {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}},",
                                   cpp_string(f.name), f.param_elems, f.padded_elems, f.shard_elems,
                                   first[static_cast<size_t>(f.index)], f.tensors.size(),
                                   persistent(BufferKind::ParamShard),
                                   persistent(BufferKind::MasterWeights),
                                   persistent(BufferKind::OptimizerState), grad_shard,
                                   grad_bytes == 4 ? "dtype_id::fp32" : dtype_enum(half_)),
                       "     ") +
             "\n";
    }
    out += "};\n\n";

    out += "// Ops in issue order, with the ops on other streams they wait for.\n";
    std::string rows;
    for (const Op& op : s_.ops) {
      out += int_array(fmt::format("kDeps{}", op.id), op.deps);
      rows += op_row(op);
    }
    out += "constexpr program_op kOps[] = {\n" + rows + "};\n\n";
    std::vector<int> host_ops;
    if (cuda_)
      for (const Op& op : s_.ops)
        if (runs_on_host(s_, op)) host_ops.push_back(op.id);
    if (!host_ops.empty())
      out += "// Ops run on the host (offload), by the CUDA executor's host worker.\n" +
             int_array("kHostOps", host_ops) + "\n";

    int workspace = -1, rope = -1, staging = -1;
    for (const Buffer& b : s_.buffers) {
      if (b.kind == BufferKind::Workspace) workspace = b.id;
      if (b.kind == BufferKind::RopeTables) rope = b.id;
      if (b.kind == BufferKind::CheckpointStaging) staging = b.id;
    }
    const OptimizerSpec& o = t.optimizer;
    const LrScheduleSpec& lr = t.lr_schedule;
    const PrecisionSpec& pr = par.precision;
    auto i = [](int64_t v) { return std::to_string(v); };
    auto b = [](bool v) { return std::string(v ? "true" : "false"); };
    const std::vector<Init> program = {
        {"spec_path", cpp_string(path_)},
        {"model_name", cpp_string(model_.name)},
        {"schedule_text", "kScheduleText"},
        {"hash", fmt::format("0x{:016x}ull", hash)},
        {"model",
         "",
         {{"vocab", i(model_.vocab)},
          {"context", i(model_.context)},
          {"width", i(model_.width)},
          {"heads", i(model_.heads)},
          {"layers", i(model_.layers)},
          {"ffn_hidden", i(model_.ffn_hidden)},
          {"tied", b(model_.tie_embeddings)},
          {"params", i(s_.units.total_params)},
          {"padded_vocab", i(model_.padded_vocab())}}},
        {"parallel",
         "",
         {{"world", i(par.world)},
          {"shard_group", i(par.shard_group)},
          {"micro_batches", i(par.accumulate.micro_batches)},
          {"micro_batch", i(s_.micro_batch)},
          {"precision",
           "",
           {{"param", dtype_enum(pr.param)},
            {"reduce", comm_ ? dtype_enum(pr.reduce) : "dtype_id::fp32"},
            {"master", dtype_enum(pr.master)},
            {"loss_scale",
             "",
             {{"dynamic", b(pr.loss_scale.kind == LossScaleKind::Dynamic)},
              {"init", cpp_double(pr.loss_scale.init)},
              {"interval", i(pr.loss_scale.interval)}}}}}}},
        {"train",
         "",
         {{"optimizer",
           "",
           {{"kind",
             o.kind == OptimizerKind::AdamW ? "optimizer_kind::adamw" : "optimizer_kind::sgd"},
            {"lr", cpp_double(o.lr)},
            {"beta1", cpp_double(o.beta1)},
            {"beta2", cpp_double(o.beta2)},
            {"eps", cpp_double(o.eps)},
            {"weight_decay", cpp_double(o.weight_decay)},
            {"momentum", cpp_double(o.momentum)}}},
          {"lr_schedule",
           "",
           {{"kind", fmt::format("lr_schedule_kind::{}", to_string(lr.kind))},
            {"warmup", i(lr.warmup)},
            {"min_lr", cpp_double(lr.min_lr)}}},
          {"steps", i(t.steps)},
          {"clip", cpp_double(t.clip)},
          {"seed", i(t.seed)},
          {"data", "", data_fields(t.data)},
          {"log_every", i(t.log_every)},
          {"checkpoint",
           "",
           {{"every", i(t.checkpoint.enabled ? t.checkpoint.every : 0)},
            {"dir", cpp_string(t.checkpoint.dir)},
            {"keep", i(t.checkpoint.keep)}}},
          {"shuffle", b(t.shuffle)}}},
        {"plan",
         "",
         {{"device_arena_bytes", i(m_.device_arena_bytes)},
          {"host_arena_bytes", i(m_.host_arena_bytes)},
          {"live_peak_bytes", i(m_.live_peak_bytes)},
          {"workspace_buffer", i(workspace)},
          {"flash_attention", b(act_.flash_attention)}}},
        {"buffers", "kBuffers"},
        {"buffer_count", i(static_cast<int64_t>(s_.buffers.size()))},
        {"units", "kUnits"},
        {"unit_count", i(static_cast<int64_t>(s_.units.units.size()))},
        {"tensors", "kTensors"},
        {"tensor_count", i(count)},
        {"ops", "kOps"},
        {"op_count", i(static_cast<int64_t>(s_.ops.size()))}};
    std::vector<Init> all = program;
    auto fields_of = [&](const char* name) -> std::vector<Init>& {
      return std::find_if(all.begin(), all.end(), [&](const Init& f) { return f.name == name; })
          ->fields;
    };
    if (model_.family == Family::Llama) {  // gpt2 programs leave llama's fields at their defaults
      std::vector<Init>& m = fields_of("model");
      m.push_back({"family", "model_family::llama"});
      m.push_back({"kv_heads", i(model_.kv_heads)});
      m.push_back({"norm_eps", cpp_double(model_.norm_eps)});
      std::vector<Init> rope_fields = {{"theta", cpp_double(model_.rope_theta)}};
      if (const RopeScalingSpec& r = model_.rope_scaling; r.enabled) {
        rope_fields.push_back({"factor", cpp_double(r.factor)});
        rope_fields.push_back({"low_freq", cpp_double(r.low_freq)});
        rope_fields.push_back({"high_freq", cpp_double(r.high_freq)});
        rope_fields.push_back({"original_context", i(r.original_context)});
      }
      m.push_back({"rope", "", rope_fields});
      fields_of("plan").push_back({"rope_buffer", i(rope)});
    }
    if (t.val) {
      std::vector<Init>& train = fields_of("train");
      train.push_back({"val", "", data_fields(*t.val)});
      train.push_back({"val_every", i(t.val_every)});
      train.push_back({"val_sequences", i(t.val_sequences)});
    }
    fields_of("train").push_back({"stall_timeout_s", cpp_double(t.stall_timeout)});
    if (const GuardSpec& g = t.guard; g.enabled())
      fields_of("train").push_back({"guard",
                                    "",
                                    {{"loss_z", cpp_double(g.loss_z)},
                                     {"norm_z", cpp_double(g.norm_z)},
                                     {"window", i(g.window)},
                                     {"max_skips", i(g.max_skips)}}});
    fields_of("plan").push_back({"validation_op_count", i(validation_pass(s_).op_count)});
    if (m_.red_zone_bytes > 0)
      fields_of("plan").push_back({"red_zone_bytes", i(m_.red_zone_bytes)});
    if (staging >= 0) fields_of("plan").push_back({"checkpoint_staging_buffer", i(staging)});
    if (!host_ops.empty()) {
      all.push_back({"host_ops", "kHostOps"});
      all.push_back({"host_op_count", i(static_cast<int64_t>(host_ops.size()))});
    }
    if (m_.red_zone_bytes > 0) all.push_back({"buffer_life", "kBufferLife"});
    if (!inner_red_zones_.empty()) {
      all.push_back({"inner_red_zones", "kInnerRedZones"});
      all.push_back({"inner_red_zone_count", i(static_cast<int64_t>(inner_red_zones_.size()))});
    }
    out += "const program kProgram = {\n";
    for (const Init& f : all)
      out += "    " + one_field(f, 4) + ",\n";
    out += "};\n";
    if (workspace >= 0 && !cuda_)
      out += fmt::format(
          "static_assert({} >= kCpuGemmWorkspaceBytes,\n"
          "              \"the planned GEMM workspace is smaller than the runtime needs\");\n",
          buf(workspace).bytes);
    return out;
  }

  // ---- the target's vocabulary --------------------------------------------------
  // Whether the op being written runs on the GPU. A CUDA program runs some
  // ops on the host when it offloads (runs_on_host: the norm, the optimizer
  // and collectives of host memory); those are written in the CPU vocabulary
  // and listed in kHostOps, which the CUDA executor hands to its host worker.
  bool on_gpu() const { return cuda_ && !host_; }
  // The op's gpu_exec, `g`: op_function declares it in the ops that take it.
  std::string gpu_exec() const {
    uses_gpu_exec_ = true;
    return "g";
  }
  // What kernels get last: the CPU's GEMM workspace, the GPU's gpu_exec.
  std::string ws() const { return on_gpu() ? gpu_exec() : "c.ws"; }
  // What every other call gets last: the CUDA runtime's calls are the CPU
  // runtime's names with the op's gpu_exec last (runtime/cuda/step.h), so
  // this is the one place the two vocabularies differ (nothing on the CPU).
  std::string gtail() const { return on_gpu() ? ", " + gpu_exec() : ""; }
  std::string norm_partial() const {
    return on_gpu() ? "cuda_norm_partial(c)" : "&c.grad_norm_partial";
  }
  // On a GPU, a conversion into host memory (offload) is a kernel that
  // writes it through unified addressing, or a copy when nothing converts.
  void convert(Body& b, int dst, const std::string& dst_name, const std::string& dst_t,
               const std::string& src_name, const std::string& src_t, int64_t n,
               bool accumulate) const {
    if (on_gpu() && buf(dst).space == MemSpace::Host && dst_t == src_t && !accumulate)
      call(b, "cuda_copy({}, {}, {}, {});  // {} values, nothing to convert", dst_name, src_name,
           n * (dst_t == dtype_enum(DType::FP32) ? 4 : 2), gpu_exec(), n);
    else
      call(b, "tensor_convert({}, {}, {}, {}, {}, {}{});", dst_name, dst_t, src_name, src_t, n,
           accumulate, gtail());
  }

  std::string path_;
  const Schedule& s_;
  const MemoryPlan& m_;
  const Spec& spec_;
  const ModelSpec& model_;
  EmitTarget target_;
  Hardware hardware_;  // the built-in figures of target_.hardware: the ops' predicted times
  bool cuda_ = false;
  bool host_ = false;                   // the op being written runs on the host (on_gpu)
  mutable bool uses_gpu_exec_ = false;  // the op being written takes `g` (gpu_exec)
  bool comm_ = false;
  int64_t pbytes_ = 4, rbytes_ = 4, N_ = 0;
  DType reduce_ = DType::FP32;  // the unsharded gradients' dtype (fp32 without communication)
  DType half_ = DType::BF16;    // the 16-bit dtype 16-bit buffers hold
  ActivationShape act_;
  std::set<int> zeroed_;
};

}  // namespace

std::string emit_program(const std::string& spec_path, const Schedule& schedule,
                         const MemoryPlan& memory, const EmitTarget& target) {
  return Writer(spec_path, schedule, memory, target).run();
}

}  // namespace fsdpgen
