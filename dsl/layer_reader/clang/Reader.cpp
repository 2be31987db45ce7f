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

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Lex/PPCallbacks.h>
#include <clang/Lex/Preprocessor.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/FormatVariadic.h>
#include <llvm/Support/JSON.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include "dsl/layer_reader/clang/LayerReader.h"

namespace {

using namespace clang;
namespace json = llvm::json;

constexpr int kReaderVersion = 3;
constexpr uint64_t kMaxHeaderBytes = 4'000'000;  // the header itself, not what it includes

// Every layer of the main file (layer_reader/clang/LayerReader.h), after the
// header compiled without errors.
class Consumer : public ASTConsumer {
 public:
  explicit Consumer(json::Array& out) : out_(out) {}
  void HandleTranslationUnit(ASTContext& ctx) override {
    DiagnosticsEngine& diags = ctx.getDiagnostics();
    if (diags.hasErrorOccurred()) return;  // C++ errors first, alone
    try {
      for (json::Value& v : read_layers(ctx))
        out_.push_back(std::move(v));
    } catch (const std::exception& e) {  // the reader's own, caught before Clang's frames
      diags.Report(diags.getCustomDiagID(DiagnosticsEngine::Error, "internal error: %0"))
          << e.what();
    }
  }

 private:
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
  // include roots (the top for "runtime/", runtime/include/ for "layers/") and
  // Clang's own headers (-resource-dir: stddef.h and the like). Clang's
  // warning of a stack nearly spent is for its own 8 MiB stack.
  std::vector<std::string> args = {
      "-xc++-header",          "-std=c++20",
      "-fsyntax-only",         "-resource-dir=" FSDPGEN_CLANG_RESOURCE_DIR,
      "-I" FSDPGEN_SOURCE_DIR, "-I" FSDPGEN_SOURCE_DIR "/runtime/include",
      "-fbracket-depth=256",   "-ftemplate-depth=256",
      "-Wno-stack-exhausted",  "-ferror-limit=20"};
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
