// fsdpgen-layers: reads a custom layer header (layers/fsdpgen_layer.h) with
// Clang LibTooling and prints what the planner needs of each layer in it as
// JSON: hyper-parameters, parameters (shape, initialisation), saved arrays
// and scratch (per-token extents), forward FLOPs per token and entry points.
// Problems are reported as Clang reports its own (file:line:col, the source
// line, a caret), at the byte of a shape string where the problem is.
//
//   fsdpgen-layers HEADER [-o OUT.json] [-I DIR]...
//
// Exit 0 with the JSON; 1 with diagnostics; 2 for bad arguments. Nothing
// thrown crosses LLVM's frames: errors go through Clang's DiagnosticsEngine.
// A header nested deeper than the reader's stack, and an include of a FIFO or
// device, are errors too (exit 1), never a crash or a wait.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/Expr.h>
#include <clang/AST/TypeLoc.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/TargetInfo.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Lex/PPCallbacks.h>
#include <clang/Lex/Preprocessor.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/JSON.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include "layers/Expr.h"
#include "suggest/Suggest.h"

namespace {

using namespace clang;
namespace json = llvm::json;

constexpr int kReaderVersion = 2;
constexpr uint64_t kMaxHeaderBytes = 4'000'000;  // the header itself, not what it includes
constexpr int kMaxArgDepth = 64;                 // a member's template argument, in its AST

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
          json::Object a{{"name", name}, {"per_token", extent->text}, {"fp32", fp32}};
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
    json::Object j{{"name", member->getNameAsString()},
                   {"shape", std::move(dims)},
                   {"init", json::Object{{"kind", kinds[static_cast<int>(parsed->kind)]},
                                         {"std", parsed->std},
                                         {"std_text", parsed->std_text}}}};
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

// Every class template of the main file (and of namespaces in it, however
// deep: `namespace a::b::...` nests without braces), in the order written.
class Consumer : public ASTConsumer {
 public:
  explicit Consumer(json::Array& out) : out_(out) {}
  void HandleTranslationUnit(ASTContext& ctx) override {
    DiagnosticsEngine& diags = ctx.getDiagnostics();
    if (diags.hasErrorOccurred()) return;  // C++ errors first, alone
    try {
      LayerReader reader(ctx);
      visit(ctx, reader);
      for (json::Value& v : reader.layers)
        out_.push_back(std::move(v));
    } catch (const std::exception& e) {  // the reader's own, caught before Clang's frames
      diags.Report(diags.getCustomDiagID(DiagnosticsEngine::Error, "internal error: %0"))
          << e.what();
    }
  }

 private:
  static void visit(ASTContext& ctx, LayerReader& reader) {
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
  json::Array& out_;
};

// What Clang opens that is neither a regular file nor a directory (a FIFO,
// whose open waits for a writer; a device) reads as an empty file instead, so
// that IncludeGuard names it where it is included.
class NoSpecialFiles : public llvm::vfs::ProxyFileSystem {
 public:
  explicit NoSpecialFiles(IntrusiveRefCntPtr<llvm::vfs::FileSystem> fs)
      : ProxyFileSystem(std::move(fs)) {}
  llvm::ErrorOr<std::unique_ptr<llvm::vfs::File>> openFileForRead(const Twine& path) override {
    llvm::ErrorOr<llvm::vfs::Status> st = status(path);
    if (!st || st->isRegularFile() || st->isDirectory())
      return ProxyFileSystem::openFileForRead(path);
    return std::unique_ptr<llvm::vfs::File>(
        new Empty(llvm::vfs::Status::copyWithNewName(*st, path)));
  }

 private:
  class Empty : public llvm::vfs::File {
   public:
    explicit Empty(llvm::vfs::Status st) : st_(std::move(st)) {}
    llvm::ErrorOr<llvm::vfs::Status> status() override { return st_; }
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> getBuffer(const Twine& name, int64_t, bool,
                                                                 bool) override {
      return llvm::MemoryBuffer::getMemBuffer("", name.str());
    }
    std::error_code close() override { return {}; }

   private:
    llvm::vfs::Status st_;
  };
};

// An #include of something that is not a regular file (/dev/zero, a FIFO)
// is an error where it is written: reading it could last forever.
class IncludeGuard : public PPCallbacks {
 public:
  explicit IncludeGuard(DiagnosticsEngine& d) : diags_(d) {}
  void InclusionDirective(SourceLocation hash, const Token&, StringRef name, bool,
                          CharSourceRange range, OptionalFileEntryRef file, StringRef, StringRef,
                          const Module*, bool, SrcMgr::CharacteristicKind) override {
    if (!file || llvm::sys::fs::is_regular_file(file->getName())) return;
    diags_.Report(range.getBegin(),
                  diags_.getCustomDiagID(DiagnosticsEngine::Fatal, "'%0' is not a regular file"))
        << name;
    (void)hash;
  }

 private:
  DiagnosticsEngine& diags_;
};

class Action : public ASTFrontendAction {
 public:
  explicit Action(json::Array& out) : out_(out) {}
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance&, llvm::StringRef) override {
    return std::make_unique<Consumer>(out_);
  }
  bool BeginSourceFileAction(CompilerInstance& ci) override {
    ci.getPreprocessor().addPPCallbacks(std::make_unique<IncludeGuard>(ci.getDiagnostics()));
    return true;
  }

 private:
  json::Array& out_;
};

class Factory : public tooling::FrontendActionFactory {
 public:
  explicit Factory(json::Array& out) : out_(out) {}
  std::unique_ptr<FrontendAction> create() override { return std::make_unique<Action>(out_); }

 private:
  json::Array& out_;
};

// What the command line asks for.
struct Options {
  std::string header, output;
  std::vector<std::string> includes;
};

// Reads o.header and writes its JSON; the exit status.
int read_header(const Options& o) {
  const std::string& header = o.header;
  if (!llvm::sys::fs::is_regular_file(header)) {
    std::fprintf(stderr, "fsdpgen-layers: %s: %s\n", header.c_str(),
                 llvm::sys::fs::exists(header) ? "not a regular file" : "no such file");
    return 1;
  }
  uint64_t size = 0;
  if (!llvm::sys::fs::file_size(header, size) && size > kMaxHeaderBytes) {
    std::fprintf(stderr,
                 "fsdpgen-layers: %s: %.1f MB is too large for a layer header (at most %.0f MB): "
                 "a layer is a class template of a few members and two functions\n",
                 header.c_str(), size / 1e6, kMaxHeaderBytes / 1e6);
    return 1;
  }
  // The header alone, as its own translation unit, C++20, with the API's
  // directory and Clang's own headers (-resource-dir: stddef.h and the like).
  // Clang's warning of a stack nearly spent is for its own 8 MiB stack.
  std::vector<std::string> args = {
      "-xc++-header",          "-std=c++20",
      "-fsyntax-only",         "-resource-dir=" FSDPGEN_CLANG_RESOURCE_DIR,
      "-I" FSDPGEN_SOURCE_DIR, "-fbracket-depth=256",
      "-ftemplate-depth=256",  "-Wno-stack-exhausted",
      "-ferror-limit=20"};
  for (const std::string& dir : o.includes)
    args.push_back("-I" + dir);
  tooling::FixedCompilationDatabase db(".", args);
  tooling::ClangTool tool(
      db, {header}, std::make_shared<PCHContainerOperations>(),
      llvm::makeIntrusiveRefCnt<NoSpecialFiles>(llvm::vfs::getRealFileSystem()));
  json::Array layers;
  Factory factory(layers);
  const int status = tool.run(&factory);
  if (status != 0) return 1;
  json::Object doc{{"reader", kReaderVersion}, {"header", header}, {"layers", std::move(layers)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", json::Value(std::move(doc))) << "\n";
  os.flush();
  if (o.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::error_code ec;
  llvm::raw_fd_ostream f(o.output, ec);
  if (ec) {
    std::fprintf(stderr, "fsdpgen-layers: cannot write %s: %s\n", o.output.c_str(),
                 ec.message().c_str());
    return 1;
  }
  f << text;
  return 0;
}

// Clang's parser recurses once per level of nesting it reads, and
// -fbracket-depth bounds parentheses, brackets and braces but not template
// arguments (W<W<...>>): the reading runs on a thread with a kStackBytes stack
// of its own above a guard region, and a fault in the guard is reported as
// nesting too deep, not as a crash.
constexpr size_t kStackBytes = size_t{512} << 20;
constexpr size_t kGuardBytes = size_t{1} << 20;

char* g_guard = nullptr;        // the reading thread's guard region
char g_overflow_message[1024];  // written as it is: a signal handler allocates nothing
size_t g_overflow_bytes = 0;
alignas(16) char g_signal_stack[64 << 10];  // where on_fault runs, the thread's stack being spent

// Not instrumented: AddressSanitizer would warn of _exit called on another stack.
__attribute__((no_sanitize("address"))) void on_fault(int sig, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  if (g_guard && at >= g_guard && at < g_guard + kGuardBytes) {
    (void)!write(STDERR_FILENO, g_overflow_message, g_overflow_bytes);
    _exit(1);
  }
  signal(sig, SIG_DFL);  // another fault: it recurs on return, with the default action
}

// read_header(o), whatever it throws caught, on the calling thread; the
// thread gets a signal stack unless it has one (AddressSanitizer gives one).
int read_header_caught(const Options& o) {
  stack_t old{};
  if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
    stack_t alt{};
    alt.ss_sp = g_signal_stack;
    alt.ss_size = sizeof g_signal_stack;
    sigaltstack(&alt, nullptr);
  }
  try {
    return read_header(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpgen-layers: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "fsdpgen-layers: internal error\n");
  }
  return 1;
}

// read_header_caught(o) on a thread with a kStackBytes stack; its exit status.
int read_header_on_deep_stack(const Options& o) {
  void* base = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED || mprotect(base, kGuardBytes, PROT_NONE) != 0) {
    std::fprintf(stderr, "fsdpgen-layers: cannot map a %zu MiB stack to read with: %s\n",
                 kStackBytes >> 20, std::strerror(errno));
    return 1;
  }
  g_guard = static_cast<char*>(base);
  const int n = std::snprintf(
      g_overflow_message, sizeof g_overflow_message,
      "fsdpgen-layers: error: %s: nested too deeply to read: Clang ran past the reader's %zu MiB "
      "stack (a layer header nests parentheses, brackets and template arguments a few "
      "levels deep)\n",
      o.header.c_str(), kStackBytes >> 20);
  g_overflow_bytes = std::min(static_cast<size_t>(std::max(n, 0)), sizeof g_overflow_message - 1);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  struct Job {
    const Options* o;
    int status;
  } job{&o, 1};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, g_guard + kGuardBytes, kStackBytes);
  pthread_t thread;
  const int err = pthread_create(
      &thread, &attr,
      [](void* j) -> void* {
        static_cast<Job*>(j)->status = read_header_caught(*static_cast<Job*>(j)->o);
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    std::fprintf(stderr, "fsdpgen-layers: cannot start the reading thread: %s\n",
                 std::strerror(err));
    return 1;
  }
  pthread_join(thread, nullptr);
  return job.status;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-o" || a == "-I") && i + 1 < argc) {
      (a == "-o" ? o.output : (o.includes.emplace_back(), o.includes.back())) = argv[++i];
    } else if (a.rfind("-I", 0) == 0 && a.size() > 2) {
      o.includes.push_back(a.substr(2));
    } else if (a == "--version") {
      std::printf("fsdpgen-layers %d (LLVM %s)\n", kReaderVersion, LLVM_VERSION_STRING);
      return 0;
    } else if (a.empty() || a[0] == '-' || !o.header.empty()) {
      std::fprintf(stderr,
                   "fsdpgen-layers: %s '%s'\nusage: fsdpgen-layers HEADER [-o OUT.json] "
                   "[-I DIR]...\n",
                   a.empty() || a[0] == '-' ? "unknown option" : "one header at a time, not also",
                   a.c_str());
      return 2;
    } else {
      o.header = a;
    }
  }
  if (o.header.empty()) {
    std::fprintf(stderr, "usage: fsdpgen-layers HEADER [-o OUT.json] [-I DIR]...\n");
    return 2;
  }
  return read_header_on_deep_stack(o);
} catch (const std::exception& e) {
  std::fprintf(stderr, "fsdpgen-layers: error: %s\n", e.what());
  return 1;
} catch (...) {
  std::fprintf(stderr, "fsdpgen-layers: internal error\n");
  return 1;
}
