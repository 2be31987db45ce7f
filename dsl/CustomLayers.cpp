// CustomLayers: the spec's layers section; see CustomLayers.h.
#include "dsl/CustomLayers.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/Layers.h"
#include "dsl/Values.h"
#include "dsl/layer_reader/ReadLayers.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {

std::string layer_reader_path() {
  if (const char* r = std::getenv("FSDPGEN_LAYER_READER"); r && *r) return r;
  return FSDPGEN_DEFAULT_LAYER_READER;
}

namespace {

constexpr int64_t kMaxHyper = int64_t{1} << 30;

// The model values a hyper-parameter can be bound to by name.
std::vector<std::pair<std::string_view, int64_t>> model_values(const ModelSpec& m) {
  return {{"width", m.width},       {"ffn_hidden", m.ffn_hidden}, {"heads", m.heads},
          {"kv_heads", m.kv_heads}, {"head_dim", m.head_dim()},   {"context", m.context},
          {"vocab", m.vocab},       {"layers", m.layers}};
}

std::vector<std::string_view> names_of(const std::vector<std::string>& v) {
  return {v.begin(), v.end()};
}

CustomTensorSpec::Init tensor_init(layers::Init::Kind k) {
  switch (k) {
    case layers::Init::Kind::Normal:
      return CustomTensorSpec::Init::Normal;
    case layers::Init::Kind::Ones:
      return CustomTensorSpec::Init::Ones;
    case layers::Init::Kind::Zeros:
      return CustomTensorSpec::Init::Zeros;
  }
  return CustomTensorSpec::Init::Normal;
}

// The reader's output as notes, one per Clang diagnostic with its source
// lines (a note is cut at a few hundred bytes; Clang's output is as long as it
// is), the header's absolute path as Clang writes it shown as the spec's
// directory resolves it, without Clang's closing count (fsdpgen counts its own).
std::vector<std::string> reader_notes(std::string said, const std::string& header) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(header, ec).string();
  if (!ec && !absolute.empty() && absolute != header)
    for (size_t at = 0; (at = said.find(absolute, at)) != std::string::npos; at += header.size())
      said.replace(at, absolute.size(), header);
  static const std::regex located(R"(^\S.*:\d+:\d+: (fatal error|error|warning|note|remark): )");
  static const std::regex summary(
      R"(^(\d+ (error|warning)s? (and \d+ (error|warning)s? )?generated\.|Error while processing .*\.)$)");
  const std::string_view included = "In file included from ";
  std::vector<std::string> notes;
  bool includes_only = false;  // the last note is an include stack awaiting its diagnostic
  std::istringstream in(said);
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, summary)) continue;
    const bool include = line.rfind(included, 0) == 0;
    const bool starts = include || std::regex_search(line, located);
    if (notes.empty() || (starts && !includes_only)) {
      notes.push_back(line);
    } else {
      notes.back() += "\n" + line;
    }
    if (starts) includes_only = include;
  }
  for (std::string& n : notes)
    while (!n.empty() && n.back() == '\n')
      n.pop_back();
  std::erase_if(notes, [](const std::string& n) { return n.empty(); });
  return notes;
}

class CustomLayerReader {
  // The layers of the imported headers, each with its header's index.
  struct Declared {
    layers::LayerDecl decl;
    size_t header = 0;
  };

 public:
  explicit CustomLayerReader(CheckContext& ctx)
      : d_(ctx.diags), v_(ctx.diags), m_(ctx.spec.model) {}

  void read(const ast::Section& section, const std::string& spec_dir) {
    const ast::Entry* import = nullptr;
    bool unreadable_import = false;  // given, but its value did not parse
    std::vector<const ast::Entry*> modules;
    std::map<std::string, const ast::Entry*> seen;
    for (const ast::Entry& e : section.entries) {
      if (e.kind == ast::Entry::Kind::Error) {  // reported by the parser
        unreadable_import |= e.key == "import";
        continue;
      }
      auto [it, fresh] = seen.emplace(e.key, &e);
      if (!fresh) {
        Diagnostic& x =
            d_.error(e.key_span, fmt::format("duplicate key '{}' in section 'layers'", e.key));
        Diagnostics::note(x, it->second->key_span, "previous definition is here");
        continue;
      }
      if (e.key == "import")
        import = &e;
      else
        modules.push_back(&e);
    }
    if (!import) {
      if (unreadable_import) return;  // no header to check the modules against
      Diagnostic& x = d_.error(section.kind_span, "section 'layers' names no header");
      Diagnostics::note(x,
                        "write 'import = \"my_layers.h\"' in it: the C++ header that declares "
                        "the layers (layers/fsdpgen_layer.h)");
      return;
    }
    if (!read_header(*import, spec_dir)) return;
    for (const ast::Entry* e : modules) {
      if (e->key == "cuda")
        read_cuda_sources(*e, spec_dir);
      else
        read_module(*e);
    }
    // A header that replaces no module is read (and checked) but not kept:
    // a spec without custom layers prints no layers section.
    if (m_.custom.empty()) m_.layer_headers.clear(), m_.layer_cuda_sources.clear();
    // In block order, as the planner walks them.
    std::sort(m_.custom.begin(), m_.custom.end(), [&](const auto& a, const auto& b) {
      return replaceable_module(m_, a.module)->first_piece <
             replaceable_module(m_, b.module)->first_piece;
    });
  }

 private:
  // The values of `key = "a"` or `key = ["a", "b"]`; none (reported) for an
  // empty list or a block.
  std::vector<const ast::Value*> paths_of(const ast::Entry& e, std::string_view example) {
    if (e.kind != ast::Entry::Kind::Assign) {
      d_.error(e.key_span,
               fmt::format("'{}' takes a file's path: write '{} = \"{}\"'", e.key, e.key, example));
      return {};
    }
    std::vector<const ast::Value*> paths = {&e.value};
    if (e.value.kind == ast::Value::Kind::List) {
      paths.clear();
      for (const ast::Value& v : e.value.items)
        paths.push_back(&v);
      if (paths.empty()) d_.error(e.value.span, fmt::format("'{}' names no file", e.key));
    }
    return paths;
  }

  // The path a string value names, resolved from the spec's directory, if
  // it is a regular file (else reported: `what` names the kind of file).
  std::optional<std::string> existing_file(const ast::Value& value, const std::string& key,
                                           const std::string& spec_dir, std::string_view what) {
    std::optional<std::string> path = v_.as_string(value, key);
    if (!path) return std::nullopt;
    std::filesystem::path p(*path);
    if (p.is_relative() && !spec_dir.empty()) p = std::filesystem::path(spec_dir) / p;
    const std::string file = p.lexically_normal().string();
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec)) return file;
    Diagnostic& x =
        d_.error(value.span, fmt::format("{} '{}' {}", what, *path,
                                         std::filesystem::exists(file, ec) ? "is not a regular file"
                                                                           : "does not exist"));
    if (p.is_relative()) Diagnostics::note(x, "a relative path is found from the spec's directory");
    return std::nullopt;
  }

  // import = "x.h" | ["x.h", "y.h"]
  bool read_header(const ast::Entry& import, const std::string& spec_dir) {
    const std::vector<const ast::Value*> paths = paths_of(import, "my_layers.h");
    bool ok = !paths.empty();
    for (const ast::Value* v : paths)
      ok &= read_one_header(*v, spec_dir);
    return ok && distinct_names(import.value.span);
  }

  // cuda = "x.cu" | ["x.cu", "y.cu"]: the layers' CUDA entry points, compiled
  // by nvcc into a CUDA program (codegen/emit/Build.h).
  void read_cuda_sources(const ast::Entry& e, const std::string& spec_dir) {
    for (const ast::Value* v : paths_of(e, "my_layers.cu")) {
      std::optional<std::string> file = existing_file(*v, "cuda", spec_dir, "CUDA source");
      if (!file) continue;
      if (std::filesystem::path(*file).extension() != ".cu") {
        Diagnostic& x = d_.error(v->span, fmt::format("'{}' is not a CUDA source", v->text));
        Diagnostics::note(x, "nvcc compiles the files 'cuda' names: their names end in '.cu'");
        continue;
      }
      if (std::find(m_.layer_cuda_sources.begin(), m_.layer_cuda_sources.end(), *file) !=
          m_.layer_cuda_sources.end()) {
        d_.error(v->span, fmt::format("'{}' is named twice", v->text));
        continue;
      }
      m_.layer_cuda_sources.push_back(*file);
    }
  }

  bool read_one_header(const ast::Value& value, const std::string& spec_dir) {
    const std::optional<std::string> found =
        existing_file(value, "import", spec_dir, "layer header");
    if (!found) return false;
    const std::string written = value.text;
    const std::string header = *found;
    if (std::find(m_.layer_headers.begin(), m_.layer_headers.end(), header) !=
        m_.layer_headers.end()) {
      d_.error(value.span, fmt::format("'{}' is imported twice", written));
      return false;
    }
    layers::ReadResult r =
        layers::read_layers(layer_reader_path(), header, layers::default_layer_cache_dir());
    if (!r.layers) {
      Diagnostic& x = d_.error(value.span, fmt::format("cannot read the layers of '{}'", written));
      std::vector<std::string> notes = reader_notes(r.diagnostics, header);
      if (notes.empty())  // it printed no more than Clang's closing count
        notes.push_back(
            fmt::format("the layer reader {} failed without a message", layer_reader_path()));
      for (std::string& n : notes)
        Diagnostics::note(x, std::move(n));
      return false;
    }
    for (layers::LayerDecl& d : *r.layers) {
      for (const Declared& other : decls_)
        if (other.decl.name == d.name) {
          d_.error(value.span, fmt::format("layer '{}' is declared in both '{}' and '{}'", d.name,
                                           written_[other.header], written));
          return false;
        }
      decls_.push_back({std::move(d), m_.layer_headers.size()});
    }
    m_.layer_headers.push_back(header);
    written_.push_back(written);
    return true;
  }

  // The generated program includes each header by its file name.
  bool distinct_names(Span at) {
    std::map<std::string, std::string> seen;
    for (size_t i = 0; i < m_.layer_headers.size(); ++i) {
      const std::string name = std::filesystem::path(m_.layer_headers[i]).filename().string();
      auto [it, fresh] = seen.emplace(name, written_[i]);
      if (fresh) continue;
      Diagnostic& x = d_.error(
          at, fmt::format("'{}' and '{}' have the same file name", it->second, written_[i]));
      Diagnostics::note(x,
                        "the generated program includes each header by its file name: rename one");
      return false;
    }
    return true;
  }

  // `module = Layer(hyper = value, ...)`
  void read_module(const ast::Entry& e) {
    const model::Module* module = replaceable_module(m_, e.key);
    if (!module) {
      unknown_module(e);
      return;
    }
    if (e.kind != ast::Entry::Kind::Assign ||
        (e.value.kind != ast::Value::Kind::Call && e.value.kind != ast::Value::Kind::Ident)) {
      Diagnostic& x = d_.error(e.kind == ast::Entry::Kind::Assign ? e.value.span : e.key_span,
                               fmt::format("'{}' takes a layer of the header", e.key));
      Diagnostics::note(x, fmt::format("write e.g. '{} = {}'", e.key, example_call()));
      return;
    }
    const Declared* found = find_layer(e.value);
    if (!found) return;
    const layers::LayerDecl* decl = &found->decl;
    std::map<std::string, int64_t> values;
    std::map<std::string, std::string> from;
    bool ok = true;
    for (const ast::Arg& a : e.value.args)
      ok &= read_hyper(*decl, a, values, from);
    if (!ok) return;
    std::vector<std::string_view> missing;
    for (const std::string& h : decl->hyper)
      if (!values.count(h)) missing.push_back(h);
    if (!missing.empty()) {
      Diagnostic& x =
          d_.error(e.value.span, fmt::format("layer '{}' needs a value for {}", decl->name,
                                             quoted_choices(missing, " and ")));
      Diagnostics::note(x, fmt::format("bind each to a model value or a number, e.g. '{} = width'",
                                       missing.front()));
      return;
    }
    if (!width_matches(e, *decl, values)) return;
    std::string error;
    const layers::HeaderAt* at = nullptr;
    std::optional<CustomLayerSpec> c = bind_custom_layer(e.key, *decl, values, from, &error, &at);
    if (!c) {
      Diagnostic& x = d_.error(e.value.span, error);
      if (at) {  // the member's text in the header, which these values make wrong
        std::vector<std::string> bound;
        for (const std::string& h : decl->hyper)
          bound.push_back(fmt::format("{} = {}", h, values.at(h)));
        Diagnostics::note(x, layers::header_excerpt(
                                 m_.layer_headers[found->header], *at,
                                 fmt::format("written here, with {}", fmt::join(bound, ", "))));
      }
      return;
    }
    c->header = m_.layer_headers[found->header];
    m_.custom.push_back(std::move(*c));
  }

  // A module's layer maps (tokens, width) to (tokens, width): its d_model,
  // the layer API's name for that width, is the model's.
  bool width_matches(const ast::Entry& e, const layers::LayerDecl& decl,
                     const std::map<std::string, int64_t>& values) {
    auto d_model = values.find("d_model");
    if (d_model == values.end() || d_model->second == m_.width) return true;
    Span at = e.value.span;
    for (const ast::Arg& a : e.value.args)
      if (a.name == "d_model") at = a.value.span;
    Diagnostic& x = d_.error(
        at, fmt::format("layer '{}' in place of the blocks' '{}' has d_model = {}, but the model's "
                        "width is {}",
                        decl.name, e.key, d_model->second, m_.width));
    Diagnostics::note(x,
                      "a block's module maps (tokens, width) to (tokens, width): write "
                      "'d_model = width'");
    return false;
  }

  // "GeluMlp(d_model = width, d_ff = ...)": the header's first layer with
  // each hyper-parameter (d_model bound to the width, the others to fill in).
  std::string example_call() const {
    if (decls_.empty()) return "MyLayer(d_model = width)";
    std::vector<std::string> args;
    for (const std::string& h : decls_.front().decl.hyper)
      args.push_back(h + (h == "d_model" ? " = width" : " = ..."));
    return fmt::format("{}({})", decls_.front().decl.name, fmt::join(args, ", "));
  }

  void unknown_module(const ast::Entry& e) {
    std::vector<std::string> names;
    for (const model::Module& x : param_layout(m_).modules)
      names.push_back(x.name);
    if (names.empty()) {  // runtime/model/llama.h's post-norm and sandwich blocks
      d_.error(e.key_span,
               fmt::format("a custom layer in place of '{}' needs block_norms = pre: a post-norm "
                           "or sandwich block has no module a custom layer can replace",
                           e.key));
      return;
    }
    const std::vector<std::string_view> choices = names_of(names);
    Diagnostic& x = d_.error(
        e.key_span, fmt::format("unknown module '{}' of a {} block", e.key, to_string(m_.family)));
    const std::string m = closest_match(e.key, choices);
    if (!m.empty()) x.message += fmt::format("; did you mean '{}'?", m);
    Diagnostics::note(x, fmt::format("a custom layer replaces {}, or is added as {}",
                                     quoted_choices({choices.begin(), choices.end() - 1}, " or "),
                                     quoted_choices({choices.back()})));
  }

  const Declared* find_layer(const ast::Value& v) {
    for (const Declared& d : decls_)
      if (d.decl.name == v.text) return &d;
    std::vector<std::string> names;
    for (const Declared& d : decls_)
      names.push_back(d.decl.name);
    std::vector<std::string> quoted;
    for (const std::string& w : written_)
      quoted.push_back("'" + w + "'");
    const Span at{v.span.begin, v.span.begin + static_cast<uint32_t>(v.text.size())};
    Diagnostic& x =
        d_.error(at, fmt::format("no layer '{}' in {}", v.text, fmt::join(quoted, " or ")));
    const std::string m = closest_match(v.text, names_of(names));
    if (!m.empty())
      x.message += fmt::format("; did you mean '{}'?", m);
    else
      Diagnostics::note(x, names.empty() ? std::string("the header declares no layer")
                                         : fmt::format("the header declares {}",
                                                       quoted_choices(names_of(names), " and ")));
    return nullptr;
  }

  // `name = width` or `name = 1024`.
  bool read_hyper(const layers::LayerDecl& decl, const ast::Arg& a,
                  std::map<std::string, int64_t>& values,
                  std::map<std::string, std::string>& from) {
    const std::vector<std::string_view> hyper = names_of(decl.hyper);
    if (a.name.empty()) {
      Diagnostic& x = d_.error(a.value.span, "a layer's hyper-parameters are given by name");
      Diagnostics::note(
          x, fmt::format("layer '{}' takes {}", decl.name, quoted_choices(hyper, " and ")));
      return false;
    }
    if (std::find(hyper.begin(), hyper.end(), a.name) == hyper.end()) {
      Diagnostic& x = d_.error(
          a.name_span, fmt::format("layer '{}' has no hyper-parameter '{}'", decl.name, a.name));
      const std::string m = closest_match(a.name, hyper);
      if (!m.empty())
        x.message += fmt::format("; did you mean '{}'?", m);
      else
        Diagnostics::note(
            x, fmt::format("its hyper-parameters are {}", quoted_choices(hyper, " and ")));
      return false;
    }
    if (values.count(a.name)) {
      d_.error(a.name_span, fmt::format("hyper-parameter '{}' is given twice", a.name));
      return false;
    }
    if (a.value.kind == ast::Value::Kind::Ident) {
      std::vector<std::string_view> keys;
      for (const auto& [key, value] : model_values(m_)) {
        keys.push_back(key);
        if (key == a.value.text) {
          values[a.name] = value;
          from[a.name] = a.value.text;
          return true;
        }
      }
      Diagnostic& x = d_.error(a.value.span, fmt::format("unknown model value '{}'", a.value.text));
      const std::string m = closest_match(a.value.text, keys);
      if (!m.empty()) x.message += fmt::format("; did you mean '{}'?", m);
      Diagnostics::note(x, fmt::format("a hyper-parameter takes a number or one of {}",
                                       quoted_choices(keys, " or ")));
      return false;
    }
    std::optional<int64_t> v = v_.as_int(a.value, a.name, 1, kMaxHyper);
    if (!v) return false;
    values[a.name] = *v;
    return true;
  }

  Diagnostics& d_;
  ValueReader v_;
  ModelSpec& m_;
  std::vector<Declared> decls_;
  std::vector<std::string> written_;  // each header's path as the spec writes it
};

}  // namespace

std::optional<CustomLayerSpec> bind_custom_layer(const std::string& module,
                                                 const layers::LayerDecl& decl,
                                                 const std::map<std::string, int64_t>& values,
                                                 const std::map<std::string, std::string>& from,
                                                 std::string* error, const layers::HeaderAt** at) {
  std::optional<layers::BoundLayer> bound = layers::bind_layer(decl, values, error, at);
  if (!bound) return std::nullopt;
  CustomLayerSpec c;
  c.module = module;
  c.layer = decl.name;
  for (const std::string& h : decl.hyper) {
    auto f = from.find(h);
    c.hyper.push_back({h, values.at(h), f == from.end() ? "" : f->second});
  }
  for (const layers::BoundLayer::Tensor& t : bound->tensors)
    c.params.push_back({t.name, t.shape, tensor_init(t.init.kind), t.init.std,
                        t.muon == layers::MuonRole::OutIn   ? CustomTensorSpec::Muon::OutIn
                        : t.muon == layers::MuonRole::InOut ? CustomTensorSpec::Muon::InOut
                                                            : CustomTensorSpec::Muon::None});
  for (size_t i = 0; i < decl.saved.size(); ++i)
    c.saved.push_back({decl.saved[i].name, bound->saved_per_token[i], decl.saved[i].fp32});
  for (size_t i = 0; i < decl.scratch.size(); ++i)
    c.scratch.push_back({decl.scratch[i].name, bound->scratch_per_token[i], decl.scratch[i].fp32});
  c.flops_per_token = bound->flops_per_token;
  c.cuda = decl.cuda;
  return c;
}

void resolve_custom_layers(const ast::Section& layers, CheckContext& ctx) {
  CustomLayerReader(ctx).read(layers, ctx.spec_dir);
}

}  // namespace fsdpgen
