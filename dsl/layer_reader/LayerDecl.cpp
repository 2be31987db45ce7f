// LayerDecl: the reader's JSON into layer declarations, and their binding; see LayerDecl.h.
#include "dsl/layer_reader/LayerDecl.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace fsdpgen::layers {
namespace {

using nlohmann::json;

// The reader's output this code reads (fsdpgen-layers' kReaderVersion).
constexpr int kReaderFormat = 3;

std::optional<Expr> expr_of(const json& j, const std::string& what, std::string* error) {
  if (!j.is_string()) {
    *error = what + " is not a string";
    return std::nullopt;
  }
  ExprError e;
  auto x = parse_expr(j.get<std::string>(), &e);
  if (!x) *error = what + ": " + e.message;
  return x;
}

// A member's "at" ({line, column, source}); an absent or malformed one is unknown.
HeaderAt at_of(const json& j, const char* key = "at") {
  HeaderAt at;
  const json a = j.value(key, json::object());
  if (!a.is_object()) return at;
  const json line = a.value("line", json()), column = a.value("column", json()),
             source = a.value("source", json());
  if (line.is_number_integer() && column.is_number_integer() && source.is_string() &&
      line.get<int64_t>() > 0 && column.get<int64_t>() > 0)
    at = {line.get<int64_t>(), column.get<int64_t>(), source.get<std::string>()};
  return at;
}

std::optional<LayerArrayDecl> array_of(const json& j, const std::string& what, std::string* error) {
  if (!j.is_object() || !j.contains("name") || !j.contains("per_token")) {
    *error = what + " lacks its name or per_token";
    return std::nullopt;
  }
  auto x = expr_of(j["per_token"], what + ".per_token", error);
  if (!x) return std::nullopt;
  return LayerArrayDecl{j["name"].get<std::string>(), *x, j.value("fp32", false), at_of(j)};
}

std::optional<LayerDecl> layer_of(const json& j, std::string* error) {
  LayerDecl d;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    *error = "a layer without a name";
    return std::nullopt;
  }
  d.name = j["name"].get<std::string>();
  const std::string at = "layer " + d.name;
  d.line = j.value("line", int64_t{0});
  for (const json& h : j.value("hyper", json::array()))
    d.hyper.push_back(h.get<std::string>());
  for (const json& p : j.value("params", json::array())) {
    if (!p.contains("name") || !p.contains("shape") || !p.contains("init")) {
      *error = at + ": a parameter lacks its name, shape or init";
      return std::nullopt;
    }
    LayerParamDecl param;
    param.name = p["name"].get<std::string>();
    param.at = at_of(p);
    for (const json& dim : p["shape"]) {
      auto x = expr_of(dim, at + "." + param.name + ".shape", error);
      if (!x) return std::nullopt;
      param.shape.push_back(*x);
    }
    const std::string kind = p["init"].value("kind", "");
    param.init.kind = kind == "ones"    ? Init::Kind::Ones
                      : kind == "zeros" ? Init::Kind::Zeros
                                        : Init::Kind::Normal;
    param.init.std = p["init"].value("std", 0.0);
    if (kind == "normal" && p["init"].contains("std_text")) {  // an expression: read again
      ExprError e;
      auto init = parse_init("normal(" + p["init"].value("std_text", "") + ")", &e);
      if (!init) {
        *error = at + "." + param.name + ".init: " + e.message;
        return std::nullopt;
      }
      param.init = *init;
    }
    if (kind != "ones" && kind != "zeros" && kind != "normal") {
      *error = at + "." + param.name + ": unknown init '" + kind + "'";
      return std::nullopt;
    }
    const std::string muon = p.value("muon", "");
    if (!muon.empty() && muon != "out_in" && muon != "in_out") {
      *error = at + "." + param.name + ": unknown muon orientation '" + muon + "'";
      return std::nullopt;
    }
    if (!muon.empty() && param.shape.size() != 2) {
      *error = at + "." + param.name + ": muon applies to a matrix, not to this 1-D parameter";
      return std::nullopt;
    }
    param.muon = muon == "out_in"   ? MuonRole::OutIn
                 : muon == "in_out" ? MuonRole::InOut
                                    : MuonRole::None;
    d.params.push_back(std::move(param));
  }
  for (const char* kind : {"saved", "scratch"})
    for (const json& a : j.value(kind, json::array())) {
      auto x = array_of(a, at + " " + kind, error);
      if (!x) return std::nullopt;
      (std::string(kind) == "saved" ? d.saved : d.scratch).push_back(*x);
    }
  auto flops = expr_of(j.value("flops", json("")), at + ".flops", error);
  if (!flops) return std::nullopt;
  d.flops = *flops;
  d.flops_at = at_of(j, "flops_at");
  const json entry = j.value("entry_points", json::object());
  d.cuda = entry.value("forward_cuda", false) && entry.value("backward_cuda", false);
  return d;
}

// "(4096, 1024)".
std::string dims_text(const std::vector<int64_t>& shape) {
  std::string out;
  for (int64_t d : shape)
    out += (out.empty() ? "(" : ", ") + std::to_string(d);
  return out + ")";
}

// The bound layer's sizes in checked arithmetic: its tensors' elements
// together, and its saved and scratch arrays' extents together, at most
// kMaxLayerElems; false with `error` naming the member that goes past it and
// *where its text in the header.
bool within_limits(const BoundLayer& b, std::string* error, const HeaderAt** where) {
  const std::string at = "layer '" + b.decl->name + "', ";
  const std::string limit = std::to_string(kMaxLayerElems) + " (2^40)";
  int64_t total = 0;
  for (size_t i = 0; i < b.tensors.size(); ++i) {
    const BoundLayer::Tensor& t = b.tensors[i];
    *where = &b.decl->params[i].at;
    int64_t n = 1;
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(n, d, &n)) {
        *error = at + t.name + "'s shape " + dims_text(t.shape) +
                 ": its element count overflows 64 bits";
        return false;
      }
    const bool alone = n > kMaxLayerElems;
    if (!alone) total += n;  // both at most kMaxLayerElems: no overflow
    if (alone || total > kMaxLayerElems) {
      *error = at + t.name + "'s shape " + dims_text(t.shape) + " has " + std::to_string(n) +
               " elements" +
               (alone ? "" : ", which bring the layer's parameters to " + std::to_string(total)) +
               "; a layer's parameters hold at most " + limit;
      return false;
    }
  }
  int64_t per_token = 0;
  auto add = [&](const std::vector<LayerArrayDecl>& arrays, const std::vector<int64_t>& extents) {
    for (size_t i = 0; i < arrays.size(); ++i) {
      *where = &arrays[i].at;
      if (__builtin_add_overflow(per_token, extents[i], &per_token) || per_token > kMaxLayerElems) {
        *error = at + arrays[i].name + "'s extent is " + std::to_string(extents[i]) +
                 " elements per token; a layer's saved and scratch arrays hold at most " + limit +
                 " per token";
        return false;
      }
    }
    return true;
  };
  if (!add(b.decl->saved, b.saved_per_token) || !add(b.decl->scratch, b.scratch_per_token))
    return false;
  *where = nullptr;
  return true;
}

}  // namespace

int64_t BoundLayer::Tensor::elems() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t BoundLayer::saved_bytes_per_token(int64_t param_bytes) const {
  int64_t n = 0;
  for (size_t i = 0; i < saved_per_token.size(); ++i)
    n += saved_per_token[i] * (decl->saved[i].fp32 ? 4 : param_bytes);
  return n;
}

int64_t BoundLayer::scratch_bytes_per_token(int64_t param_bytes) const {
  int64_t n = 0;
  for (size_t i = 0; i < scratch_per_token.size(); ++i)
    n += scratch_per_token[i] * (decl->scratch[i].fp32 ? 4 : param_bytes);
  return n;
}

std::optional<std::vector<LayerDecl>> parse_layer_json(std::string_view text, std::string* error) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "not a JSON object";
    return std::nullopt;
  }
  if (j.value("reader", 0) != kReaderFormat) {
    *error = "written by reader format " + std::to_string(j.value("reader", 0)) + ", not " +
             std::to_string(kReaderFormat);
    return std::nullopt;
  }
  std::vector<LayerDecl> out;
  for (const json& l : j.value("layers", json::array())) {
    auto d = layer_of(l, error);
    if (!d) return std::nullopt;
    out.push_back(std::move(*d));
  }
  return out;
}

std::string header_excerpt(const std::string& header, const HeaderAt& at,
                           const std::string& message) {
  if (at.line <= 0) return header + ": " + message;
  std::string number = std::to_string(at.line);
  if (number.size() < 5) number.insert(0, 5 - number.size(), ' ');  // Clang's gutter
  std::string caret;
  for (size_t i = 0; i + 1 < static_cast<size_t>(at.column) && i < at.source.size(); ++i)
    caret += at.source[i] == '\t' ? '\t' : ' ';
  return header + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + message +
         "\n" + number + " | " + at.source + "\n" + std::string(number.size(), ' ') + " | " +
         caret + "^";
}

std::optional<BoundLayer> bind_layer(const LayerDecl& decl,
                                     const std::map<std::string, int64_t>& values,
                                     std::string* error, const HeaderAt** at) {
  const HeaderAt* where = nullptr;
  if (!at) at = &where;
  *at = nullptr;
  for (const auto& [name, v] : values)
    if (std::find(decl.hyper.begin(), decl.hyper.end(), name) == decl.hyper.end()) {
      *error = "layer '" + decl.name + "' has no hyper-parameter '" + name + "'";
      return std::nullopt;
    }
  for (const std::string& h : decl.hyper)
    if (!values.count(h)) {
      *error = "layer '" + decl.name + "' needs a value for its hyper-parameter '" + h + "'";
      return std::nullopt;
    }
  BoundLayer b;
  b.decl = &decl;
  b.hyper = values;
  auto value = [&](const Expr& x, const std::string& what,
                   const HeaderAt& written) -> std::optional<int64_t> {
    *at = &written;
    std::string e;
    auto v = x.eval(values, &e);
    if (!v) {
      *error = "layer '" + decl.name + "', " + what + " \"" + x.text + "\": " + e;
      return std::nullopt;
    }
    if (*v < 1) {
      *error = "layer '" + decl.name + "', " + what + " \"" + x.text + "\" is " +
               std::to_string(*v) + ", not at least 1";
      return std::nullopt;
    }
    return v;
  };
  for (const LayerParamDecl& p : decl.params) {
    BoundLayer::Tensor t{p.name, {}, p.init, p.muon};
    if (!p.init.names.empty()) {
      std::string why;
      const std::optional<double> std = init_std(p.init, values, &why);
      if (!std) {
        *at = nullptr;  // the init's text, whose place the reader does not give
        *error = "layer '" + decl.name + "', " + p.name + "'s init \"normal(" + p.init.std_text +
                 ")\": " + why;
        return std::nullopt;
      }
      t.init.std = *std;
    }
    for (const Expr& d : p.shape) {
      auto v = value(d, p.name + "'s shape", p.at);
      if (!v) return std::nullopt;
      t.shape.push_back(*v);
    }
    b.tensors.push_back(std::move(t));
  }
  for (const LayerArrayDecl& a : decl.saved) {
    auto v = value(a.per_token, a.name + "'s extent", a.at);
    if (!v) return std::nullopt;
    b.saved_per_token.push_back(*v);
  }
  for (const LayerArrayDecl& a : decl.scratch) {
    auto v = value(a.per_token, a.name + "'s extent", a.at);
    if (!v) return std::nullopt;
    b.scratch_per_token.push_back(*v);
  }
  if (!within_limits(b, error, at)) return std::nullopt;
  auto f = value(decl.flops, "flops", decl.flops_at);
  if (!f) return std::nullopt;
  *at = nullptr;
  b.flops_per_token = *f;
  return b;
}

}  // namespace fsdpgen::layers
