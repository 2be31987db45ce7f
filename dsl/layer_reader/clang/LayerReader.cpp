// LayerReader: reads each custom layer class template of a parsed header
// from Clang's AST (layer_reader/clang/LayerReader.h).
#include "dsl/layer_reader/clang/LayerReader.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <clang/AST/DeclCXX.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/Expr.h>
#include <clang/AST/TypeLoc.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Basic/TargetInfo.h>

#include "dsl/layer_reader/Expr.h"
#include "runtime/suggest/suggest.h"

namespace {

using namespace clang;
namespace json = llvm::json;

constexpr int kMaxArgDepth = 64;  // a member's template argument, in its AST

// The API's member kinds (layers/fsdpgen_layer.h).
enum class Member { None, Param, Saved, SavedF32, Scratch, ScratchF32, Flops };

Member member_kind(const TemplateDecl* t) {
  if (!t) return Member::None;
  const std::string q = t->getQualifiedNameAsString();
  if (q == "fsdpgen::layer::Param") return Member::Param;
  if (q == "fsdpgen::layer::Saved") return Member::Saved;
  if (q == "fsdpgen::layer::SavedF32") return Member::SavedF32;
  if (q == "fsdpgen::layer::Scratch") return Member::Scratch;
  if (q == "fsdpgen::layer::ScratchF32") return Member::ScratchF32;
  if (q == "fsdpgen::layer::Flops") return Member::Flops;
  return Member::None;
}

// The template specialization a declaration's type spells, if any.
std::optional<TemplateSpecializationTypeLoc> specialization(TypeSourceInfo* tsi) {
  if (!tsi) return std::nullopt;
  TypeLoc tl = tsi->getTypeLoc();
  for (;;) {
    if (auto q = tl.getAs<QualifiedTypeLoc>()) {
      tl = q.getUnqualifiedLoc();
      continue;
    }
    if (auto e = tl.getAs<ElaboratedTypeLoc>()) {
      tl = e.getNamedTypeLoc();
      continue;
    }
    break;
  }
  if (auto s = tl.getAs<TemplateSpecializationTypeLoc>()) return s;
  return std::nullopt;
}

// The first string literal in `s` (a template argument: a literal, perhaps in
// parentheses or a conversion), looked for at most kMaxArgDepth levels down.
const StringLiteral* find_string(const Stmt* s, int depth = 0) {
  if (!s || depth > kMaxArgDepth) return nullptr;
  if (const auto* lit = dyn_cast<StringLiteral>(s)) return lit;
  for (const Stmt* child : s->children())
    if (const StringLiteral* lit = find_string(child, depth + 1)) return lit;
  return nullptr;
}

// A string argument of a specialization, where it is written.
struct TextArg {
  std::string text;
  const StringLiteral* literal = nullptr;
  SourceLocation at;
};

class LayerReader {
 public:
  explicit LayerReader(ASTContext& ctx) : ctx_(ctx), diags_(ctx.getDiagnostics()) {}

  json::Array layers;

  void read(const ClassTemplateDecl* t) {
    const CXXRecordDecl* r = t->getTemplatedDecl();
    if (!r || !r->isThisDeclarationADefinition() || !uses_api(r)) return;
    layer_ = t;
    json::Object out;
    out["name"] = t->getNameAsString();
    const PresumedLoc p = ctx_.getSourceManager().getPresumedLoc(t->getLocation());
    out["line"] = p.isValid() ? static_cast<int64_t>(p.getLine()) : 0;
    hyper_ = read_hyper(r);
    json::Array hyper;
    for (const std::string& h : hyper_)
      hyper.push_back(h);
    out["hyper"] = std::move(hyper);
    json::Array params, saved, scratch;
    std::optional<std::string> flops;
    for (const Decl* d : r->decls()) {
      const auto* field = dyn_cast<FieldDecl>(d);
      const auto* var = dyn_cast<VarDecl>(d);
      if (!field && !var) continue;
      auto spec = specialization(field ? field->getTypeSourceInfo() : var->getTypeSourceInfo());
      if (!spec) continue;
      const Member kind = member_kind(spec->getTypePtr()->getTemplateName().getAsTemplateDecl());
      const NamedDecl* named = field ? static_cast<const NamedDecl*>(field) : var;
      const std::string name = named->getNameAsString();
      switch (kind) {
        case Member::None:
          break;
        case Member::Param:
          if (auto j = read_param(*spec, named)) params.push_back(std::move(*j));
          break;
        case Member::Saved:
        case Member::SavedF32:
        case Member::Scratch:
        case Member::ScratchF32: {
          const bool fp32 = kind == Member::SavedF32 || kind == Member::ScratchF32;
          auto extent = text_arg(*spec, fp32 ? 0 : 1, named);
          if (!extent || !check_exprs(*extent, false)) break;
          json::Object a{{"name", name},
                         {"per_token", extent->text},
                         {"fp32", fp32},
                         {"at", place(byte(*extent, 0))}};
          (kind == Member::Saved || kind == Member::SavedF32 ? saved : scratch)
              .push_back(std::move(a));
          break;
        }
        case Member::Flops: {
          auto expr = text_arg(*spec, 0, named);
          if (flops) {
            error(named->getLocation(), "a layer declares its FLOPs once");
          } else if (expr && check_exprs(*expr, false)) {
            flops = expr->text;
            out["flops_at"] = place(byte(*expr, 0));
          }
          break;
        }
      }
    }
    if (!flops)
      error(t->getLocation(),
            "layer '" + t->getNameAsString() +
                "' declares no FLOPs: add 'static constexpr fsdpgen::layer::Flops<\"...\"> "
                "flops{};', the forward's operations per token");
    out["params"] = std::move(params);
    out["saved"] = std::move(saved);
    out["scratch"] = std::move(scratch);
    out["flops"] = flops ? *flops : "";
    out["entry_points"] = read_entry_points(t, r);
    layers.push_back(std::move(out));
  }

 private:
  bool uses_api(const CXXRecordDecl* r) const {
    for (const Decl* d : r->decls()) {
      TypeSourceInfo* tsi = nullptr;
      if (const auto* f = dyn_cast<FieldDecl>(d)) tsi = f->getTypeSourceInfo();
      if (const auto* v = dyn_cast<VarDecl>(d)) tsi = v->getTypeSourceInfo();
      if (auto s = specialization(tsi))
        if (member_kind(s->getTypePtr()->getTemplateName().getAsTemplateDecl()) != Member::None)
          return true;
    }
    return false;
  }

  void error(SourceLocation at, const std::string& message) {
    diags_.Report(at, diags_.getCustomDiagID(DiagnosticsEngine::Error, "%0")) << message;
  }
  void note(SourceLocation at, const std::string& message) {
    diags_.Report(at, diags_.getCustomDiagID(DiagnosticsEngine::Note, "%0")) << message;
  }

  // The Hyper struct's fields (integers), and the layer's `hyper` member.
  std::vector<std::string> read_hyper(const CXXRecordDecl* r) {
    std::vector<std::string> names;
    const CXXRecordDecl* hyper = nullptr;
    for (const Decl* d : r->decls())
      if (const auto* nested = dyn_cast<CXXRecordDecl>(d))
        if (nested->getName() == "Hyper" && nested->isThisDeclarationADefinition()) hyper = nested;
    if (!hyper) {
      error(r->getLocation(), "layer '" + r->getNameAsString() +
                                  "' has no 'struct Hyper' of its hyper-parameters (int64_t "
                                  "fields, bound in the spec)");
      return names;
    }
    for (const FieldDecl* f : hyper->fields()) {
      if (!f->getType()->isIntegerType())
        error(f->getLocation(),
              "hyper-parameter '" + f->getNameAsString() + "' must be an integer (int64_t)");
      names.push_back(f->getNameAsString());
    }
    bool member = false;
    for (const FieldDecl* f : r->fields())
      if (f->getType()->getAsCXXRecordDecl() == hyper) member = true;
    if (!member)
      error(hyper->getLocation(), "layer '" + r->getNameAsString() +
                                      "' has no member of type Hyper: add 'Hyper hyper;', which "
                                      "the generated step fills");
    return names;
  }

  // Template argument `index` of a specialization as a string literal.
  std::optional<TextArg> text_arg(const TemplateSpecializationTypeLoc& spec, unsigned index,
                                  const NamedDecl* member) {
    if (index >= spec.getNumArgs()) {
      error(member->getLocation(), "'" + member->getNameAsString() + "' lacks an argument");
      return std::nullopt;
    }
    const TemplateArgumentLoc arg = spec.getArgLoc(index);  // by value: getArgLoc returns a copy
    const StringLiteral* lit = nullptr;
    if (arg.getArgument().getKind() == TemplateArgument::Expression)
      lit = find_string(arg.getSourceExpression());
    if (!lit || !lit->isOrdinary()) {
      error(arg.getLocation(), "expected a string literal here (\"...\")");
      return std::nullopt;
    }
    return TextArg{lit->getString().str(), lit, arg.getLocation()};
  }

  // Where `at` is in the header, for fsdpgen's messages about the text there
  // once bound (LayerDecl's HeaderAt): line, column (bytes) and that line.
  json::Object place(SourceLocation at) const {
    const SourceManager& sm = ctx_.getSourceManager();
    const SourceLocation file_at = sm.getFileLoc(at);
    const PresumedLoc p = sm.getPresumedLoc(file_at);
    bool invalid = false;
    const llvm::StringRef text = sm.getBufferData(sm.getFileID(file_at), &invalid);
    if (!p.isValid() || invalid) return json::Object{};
    const size_t offset = sm.getFileOffset(file_at);
    size_t begin = text.rfind('\n', offset == 0 ? 0 : offset - 1);
    begin = begin == llvm::StringRef::npos || offset == 0 ? 0 : begin + 1;
    const size_t end = std::min(text.find('\n', offset), text.size());
    std::string line = text.slice(begin, end).str();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!json::isUTF8(line)) line = json::fixUTF8(line);
    return json::Object{{"line", static_cast<int64_t>(p.getLine())},
                        {"column", static_cast<int64_t>(p.getColumn())},
                        {"source", line}};
  }

  SourceLocation byte(const TextArg& t, size_t offset) const {
    if (offset >= t.text.size()) offset = t.text.empty() ? 0 : t.text.size() - 1;
    return t.literal->getLocationOfByte(static_cast<unsigned>(offset), ctx_.getSourceManager(),
                                        ctx_.getLangOpts(), ctx_.getTargetInfo());
  }

  // The text's expressions (a list for a shape) parse and use only hyper-parameters.
  bool check_exprs(const TextArg& t, bool list) {
    fsdpgen::layers::ExprError e;
    std::vector<fsdpgen::layers::Expr> exprs;
    std::vector<size_t> starts;
    if (list) {
      auto l = fsdpgen::layers::parse_expr_list(t.text, &e, &starts);
      if (!l) {
        error(byte(t, e.offset), e.message);
        return false;
      }
      exprs = *l;
      if (exprs.size() > 2) {
        error(byte(t, starts[2]), "a parameter has one or two dimensions");
        return false;
      }
    } else {
      auto x = fsdpgen::layers::parse_expr(t.text, &e);
      if (!x) {
        error(byte(t, e.offset), e.message);
        return false;
      }
      exprs = {*x};
      starts = {0};
    }
    bool ok = true;
    for (size_t i = 0; i < exprs.size(); ++i)
      ok &= known_names(t, exprs[i].names(), starts[i]);
    return ok;
  }

  // Whether every name (used in t.text from `start` on) is a hyper-parameter;
  // else an error at each unknown one's first use.
  bool known_names(const TextArg& t, const std::vector<std::string>& names, size_t start) {
    bool ok = true;
    std::vector<std::string_view> known(hyper_.begin(), hyper_.end());
    for (const std::string& n : names) {
      if (std::find(hyper_.begin(), hyper_.end(), n) != hyper_.end()) continue;
      ok = false;
      // The name's first use in this expression, from its start.
      size_t at = start;
      for (size_t k = t.text.find(n, start); k != std::string::npos; k = t.text.find(n, k + 1)) {
        const bool left = k == 0 || !(std::isalnum(static_cast<unsigned char>(t.text[k - 1])) ||
                                      t.text[k - 1] == '_');
        const size_t e2 = k + n.size();
        const bool right =
            e2 >= t.text.size() ||
            !(std::isalnum(static_cast<unsigned char>(t.text[e2])) || t.text[e2] == '_');
        if (left && right) {
          at = k;
          break;
        }
      }
      std::string m = "unknown hyper-parameter '" + n + "'";
      const std::string near = fsdpgen::closest_match(n, known);
      if (!near.empty()) m += "; did you mean '" + near + "'?";
      error(byte(t, at), m);
      if (near.empty()) note(layer_->getLocation(), hyper_note());
    }
    return ok;
  }

  std::string hyper_note() const {
    std::string s = "the layer's hyper-parameters (its struct Hyper) are";
    if (hyper_.empty()) return s + " none";
    for (size_t i = 0; i < hyper_.size(); ++i)
      s += (i ? ", '" : " '") + hyper_[i] + "'";
    return s;
  }

  std::optional<json::Object> read_param(const TemplateSpecializationTypeLoc& spec,
                                         const NamedDecl* member) {
    auto shape = text_arg(spec, 2, member);
    auto init = text_arg(spec, 3, member);
    if (!shape || !init) return std::nullopt;
    bool ok = check_exprs(*shape, true);
    fsdpgen::layers::ExprError e;
    auto parsed = fsdpgen::layers::parse_init(init->text, &e);
    if (!parsed) {
      error(byte(*init, e.offset), e.message);
      ok = false;
    } else {
      ok &= known_names(*init, parsed->names, 0);
    }
    if (!ok) return std::nullopt;
    json::Array dims;
    const auto exprs = fsdpgen::layers::parse_expr_list(shape->text, &e);  // parsed above
    for (const fsdpgen::layers::Expr& d : *exprs)
      dims.push_back(d.text);
    const char* kinds[] = {"normal", "ones", "zeros"};
    const size_t rank = dims.size();
    json::Object j{{"name", member->getNameAsString()},
                   {"shape", std::move(dims)},
                   {"at", place(byte(*shape, 0))},
                   {"init", json::Object{{"kind", kinds[static_cast<int>(parsed->kind)]},
                                         {"std", parsed->std},
                                         {"std_text", parsed->std_text}}}};
    if (spec.getNumArgs() > 4) {  // Optimizer: "adamw" (the default) or "muon(out, in)" ...
      auto opt = text_arg(spec, 4, member);
      if (!opt) return std::nullopt;
      std::string words;
      for (char ch : opt->text)
        if (ch != ' ' && ch != '\t') words += ch;
      if (words == "muon(out,in)" || words == "muon(in,out)") {
        if (rank != 2) {
          error(byte(*opt, 0), "'" + member->getNameAsString() +
                                   "' is not a matrix: Muon orthogonalizes 2-D parameters only");
          return std::nullopt;
        }
        j["muon"] = words == "muon(out,in)" ? "out_in" : "in_out";
      } else if (words != "adamw") {
        error(byte(*opt, 0), "unknown optimizer \"" + opt->text +
                                 "\": write \"adamw\", \"muon(out, in)\" (rows are outputs, "
                                 "as nn.Linear) or \"muon(in, out)\" (rows are inputs, as "
                                 "GPT-2's Conv1D)");
        return std::nullopt;
      }
    }
    return j;
  }

  // forward/backward (required) and their _cuda twins (optional), each with
  // the API's parameters.
  json::Object read_entry_points(const ClassTemplateDecl* t, const CXXRecordDecl* r) {
    const TemplateParameterList* tp = t->getTemplateParameters();
    const NamedDecl* value_type = tp->size() > 0 ? tp->getParam(0) : nullptr;
    struct Want {
      const char* name;
      std::vector<char> shape;  // c: const T*, m: T*, n: int64_t
      const char* context;      // Cpu or Cuda
      const char* signature;
      bool required;
    };
    const Want wants[] = {
        {"forward",
         {'c', 'm', 'n'},
         "Cpu",
         "void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const",
         true},
        {"backward",
         {'c', 'c', 'm', 'n'},
         "Cpu",
         "void backward(const T* x, const T* dy, T* dx, int64_t tokens, const "
         "fsdpgen::layer::Cpu& cpu) const",
         true},
        {"forward_cuda",
         {'c', 'm', 'n'},
         "Cuda",
         "void forward_cuda(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cuda& cuda) "
         "const",
         false},
        {"backward_cuda",
         {'c', 'c', 'm', 'n'},
         "Cuda",
         "void backward_cuda(const T* x, const T* dy, T* dx, int64_t tokens, const "
         "fsdpgen::layer::Cuda& cuda) const",
         false},
    };
    std::vector<std::string> methods;  // the layer's named methods, for did-you-mean
    for (const CXXMethodDecl* m : r->methods())
      if (m->getIdentifier()) methods.push_back(m->getNameAsString());
    json::Object out;
    for (const Want& w : wants) {
      const CXXMethodDecl* found = nullptr;
      for (const CXXMethodDecl* m : r->methods())
        if (m->getNameAsString() == w.name) found = m;
      if (!found) {
        out[w.name] = false;
        if (!w.required) continue;
        std::string m = "layer '" + r->getNameAsString() + "' has no " + w.name;
        std::vector<std::string_view> views(methods.begin(), methods.end());
        const std::string near = fsdpgen::closest_match(w.name, views);
        if (!near.empty()) m += "; did you mean '" + near + "'?";
        error(t->getLocation(), m);
        note(t->getLocation(), std::string("declare ") + w.signature);
        continue;
      }
      out[w.name] = true;
      if (!signature_matches(found, w.shape, w.context, value_type)) {
        error(found->getLocation(), std::string(w.name) + " does not have the API's parameters");
        note(found->getLocation(), std::string("declare ") + w.signature);
      }
    }
    return out;
  }

  static bool is_value_type(QualType q, const NamedDecl* value_type) {
    const auto* p = q->getAs<TemplateTypeParmType>();
    const auto* want = dyn_cast_or_null<TemplateTypeParmDecl>(value_type);
    return p && want && p->getDepth() == want->getDepth() && p->getIndex() == want->getIndex();
  }

  static bool signature_matches(const CXXMethodDecl* m, const std::vector<char>& shape,
                                const char* context, const NamedDecl* value_type) {
    if (!m->isConst() || m->isStatic() || m->getNumParams() != shape.size() + 1 ||
        !m->getReturnType()->isVoidType())
      return false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const QualType q = m->getParamDecl(static_cast<unsigned>(i))->getType();
      if (shape[i] == 'n') {  // int64_t: a signed 64-bit integer
        const QualType c = q.getCanonicalType().getUnqualifiedType();
        if (!c->isSignedIntegerType() || m->getASTContext().getTypeSize(c) != 64) return false;
        continue;
      }
      const auto* ptr = q->getAs<PointerType>();
      if (!ptr) return false;
      const QualType pointee = ptr->getPointeeType();
      if (pointee.isConstQualified() != (shape[i] == 'c')) return false;
      if (!is_value_type(pointee.getUnqualifiedType(), value_type)) return false;
    }
    const QualType last = m->getParamDecl(static_cast<unsigned>(shape.size()))->getType();
    const auto* ref = last->getAs<LValueReferenceType>();
    if (!ref || !ref->getPointeeType().isConstQualified()) return false;
    const auto* rec = ref->getPointeeType()->getAsTagDecl();
    return rec && rec->getQualifiedNameAsString() == std::string("fsdpgen::layer::") + context;
  }

  ASTContext& ctx_;
  DiagnosticsEngine& diags_;
  const ClassTemplateDecl* layer_ = nullptr;
  std::vector<std::string> hyper_;
};

// Each class template read_layers reads, in its order, read by `reader`.
void visit(ASTContext& ctx, LayerReader& reader) {
  const SourceManager& sm = ctx.getSourceManager();
  const DeclContext* tu = ctx.getTranslationUnitDecl();
  std::vector<std::pair<DeclContext::decl_iterator, DeclContext::decl_iterator>> open = {
      {tu->decls_begin(), tu->decls_end()}};
  while (!open.empty()) {
    if (open.back().first == open.back().second) {
      open.pop_back();
      continue;
    }
    const Decl* d = *open.back().first++;
    if (!sm.isInMainFile(sm.getExpansionLoc(d->getLocation()))) continue;
    if (const auto* ns = dyn_cast<NamespaceDecl>(d))
      open.emplace_back(ns->decls_begin(), ns->decls_end());
    if (const auto* t = dyn_cast<ClassTemplateDecl>(d)) reader.read(t);
  }
}

}  // namespace

llvm::json::Array read_layers(ASTContext& ctx) {
  LayerReader reader(ctx);
  visit(ctx, reader);
  return std::move(reader.layers);
}
