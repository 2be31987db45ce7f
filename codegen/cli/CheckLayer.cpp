// CheckLayer: `fsdpgen check-layer` and its flags; see CheckLayer.h.
#include "codegen/cli/CheckLayer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/emit/Build.h"
#include "codegen/emit/BuildConfig.h"
#include "dsl/CustomLayers.h"
#include "dsl/Source.h"
#include "dsl/layer_reader/LayerDecl.h"
#include "dsl/layer_reader/ReadLayers.h"
#include "dsl/layer_reader/Subprocess.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
// The check program's time limit: a layer whose call never returns fails.
constexpr int kRunSeconds = 120;

void error(const std::string& s) {
  std::fputs(fmt::format("fsdpgen check-layer: error: {}\n", s).c_str(), stderr);
}

// A C++ string literal of `s`.
std::string literal(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The hyper-parameters from "name=value" words; nullopt after printing why.
std::optional<std::map<std::string, int64_t>> hyper_values(const layers::LayerDecl& decl,
                                                           const std::vector<std::string>& words) {
  std::map<std::string, int64_t> values;
  std::vector<std::string_view> names(decl.hyper.begin(), decl.hyper.end());
  bool ok = true;
  for (const std::string& w : words) {
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    if (eq == std::string::npos || eq == 0) {
      error(fmt::format("--hyper '{}': write name=value, e.g. --hyper {}=8", w,
                        decl.hyper.empty() ? "d_model" : decl.hyper.front()));
      ok = false;
      continue;
    }
    if (std::find(decl.hyper.begin(), decl.hyper.end(), name) == decl.hyper.end()) {
      const std::string close = closest_match(name, names);
      error(fmt::format("--hyper {}: {} has no hyper-parameter '{}'{}; it has {}", w, decl.name,
                        name, close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close),
                        names.empty() ? "none" : quoted_choices(names, " and ")));
      ok = false;
      continue;
    }
    const std::string text = w.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end || errno == ERANGE || v < 1) {
      error(fmt::format("--hyper {}: '{}' is not a positive integer", w, text));
      ok = false;
      continue;
    }
    if (!values.emplace(name, v).second) {
      error(fmt::format("--hyper {}: '{}' is given twice", w, name));
      ok = false;
    }
  }
  std::vector<std::string_view> missing;
  for (const std::string& h : decl.hyper)
    if (!values.count(h)) missing.push_back(h);
  if (!missing.empty() && ok) {
    std::string example;
    for (std::string_view m : missing)
      example += fmt::format(" --hyper {}=8", m);
    error(fmt::format("{} needs a value for {}: small ones check fastest, e.g.{}", decl.name,
                      quoted_choices(missing, " and "), example));
    ok = false;
  }
  if (!ok) return std::nullopt;
  return values;
}

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape)
    s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

// The check program: the header's layer, each member bound by name.
std::string program_text(const layers::BoundLayer& bound, const std::string& header, int64_t width,
                         int64_t tokens, const std::string& reference, const std::string& narrow) {
  const layers::LayerDecl& d = *bound.decl;
  std::string bind;
  for (const std::string& h : d.hyper)
    bind += fmt::format("    m.hyper.{} = {};\n", h, bound.hyper.at(h));
  for (size_t i = 0; i < d.params.size(); ++i) {
    std::string shape;
    for (const layers::Expr& e : d.params[i].shape)
      shape += (shape.empty() ? "" : ", ") + e.text;
    bind +=
        fmt::format("    b.param(m.{}, {}, {}, {});\n", d.params[i].name, literal(d.params[i].name),
                    bound.tensors[i].elems(),
                    literal(fmt::format("\"{}\" = {}", shape, dims_text(bound.tensors[i].shape))));
  }
  auto arrays = [&](const std::vector<layers::LayerArrayDecl>& list,
                    const std::vector<int64_t>& per_token, const char* kind) {
    for (size_t i = 0; i < list.size(); ++i)
      bind += fmt::format(
          "    b.{}_member(m.{}, {}, {}, tokens, {});\n", kind, list[i].name, literal(list[i].name),
          per_token[i], literal(fmt::format("\"{}\" = {}", list[i].per_token.text, per_token[i])));
  };
  arrays(d.saved, bound.saved_per_token, "saved");
  arrays(d.scratch, bound.scratch_per_token, "scratch");
  const std::string narrow_type = narrow.empty() ? "void" : narrow;
  return fmt::format(
      "// Generated by fsdpgen check-layer from {header}. Do not edit.\n"
      "#include \"{include}\"\n"
      "#include \"layers/layer_check.h\"\n"
      "\n"
      "namespace {{\n"
      "\n"
      "// Every member of {layer} at its own guarded place.\n"
      "struct bind_members {{\n"
      "  template <class T, class G>\n"
      "  void operator()({layer}<T, G>& m, fsdpgen::layer_check::bindings<T, G>& b,\n"
      "                  [[maybe_unused]] int64_t tokens) const {{\n"
      "{bind}"
      "  }}\n"
      "}};\n"
      "\n"
      "}}  // namespace\n"
      "\n"
      "int main() {{\n"
      "  const fsdpgen::layer_check::layer_info info{{{layer_lit}, {header_lit}, {width}, "
      "{tokens}, \"{reference}\", \"{narrow}\"}};\n"
      "  return fsdpgen::layer_check::check_main<{layer}, bind_members, {reference}, "
      "{narrow_type}>(info, bind_members{{}});\n"
      "}}\n",
      fmt::arg("header", header), fmt::arg("include", fs::path(header).filename().string()),
      fmt::arg("layer", d.name), fmt::arg("bind", bind), fmt::arg("layer_lit", literal(d.name)),
      fmt::arg("header_lit", literal(header)), fmt::arg("width", width), fmt::arg("tokens", tokens),
      fmt::arg("reference", reference), fmt::arg("narrow", narrow),
      fmt::arg("narrow_type", narrow_type));
}

// A function's name without its arguments: "GeluMlp<float, float>::forward".
std::string function_name(const std::string& f) {
  int depth = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    depth += f[i] == '<' ? 1 : f[i] == '>' ? -1 : 0;
    if (f[i] == '(' && depth == 0 && i > 0) return f.substr(0, i);
  }
  return f;
}

// "at FILE:LINE in FUNCTION" for the frames of a "@frames MODULE+0xOFF ..."
// line (by addr2line on the check program), innermost first, up to the
// first in the layer's header; a library is named only as the innermost.
std::vector<std::string> symbolized(const std::string& frames_line, const std::string& program,
                                    const std::string& header, const fs::path& work) {
  std::istringstream in(frames_line.substr(std::strlen("@frames")));
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path layer_file = fs::weakly_canonical(header, ec);
  for (std::string f; in >> f;) {
    const size_t plus = f.rfind('+');
    if (plus == std::string::npos) continue;
    const std::string module = f.substr(0, plus), offset = f.substr(plus + 1);
    if (!fs::equivalent(module, program, ec)) {
      if (out.empty()) out.push_back(fmt::format("in {}", fs::path(module).filename().string()));
      continue;
    }
    const std::string where = (work / "addr2line.txt").string();
    if (!layers::run_to_file({"addr2line", "-C", "-f", "-p", "-e", program, offset}, where,
                             kRunSeconds)
             .ok()) {
      out.push_back("at " + offset + " in the check program (addr2line did not run)");
      continue;
    }
    std::ifstream a(where);
    std::string line;
    std::getline(a, line);
    // "FUNCTION at FILE:LINE" or "FUNCTION at FILE:LINE (discriminator N)"
    const size_t at = line.rfind(" at ");
    if (at == std::string::npos || line.find("??") != std::string::npos) continue;
    std::string file = line.substr(at + 4);
    if (const size_t disc = file.find(" (discriminator"); disc != std::string::npos)
      file.resize(disc);
    const std::string path = file.substr(0, file.rfind(':'));
    const bool in_layer = fs::equivalent(path, layer_file, ec);
    out.push_back(fmt::format("at {}{} in {}", in_layer ? header : file,
                              in_layer ? file.substr(file.rfind(':')) : "",
                              function_name(line.substr(0, at))));
    if (in_layer || out.size() == 6) break;
  }
  return out;
}

// Builds the program with `reference` (and `narrow`); diagnostics shown
// only when `loud`.
bool build(const layers::BoundLayer& bound, const CheckLayerOptions& o, int64_t width,
           int64_t tokens, const std::string& reference, const std::string& narrow,
           const fs::path& work, bool loud) {
  const fs::path source = work / "check_layer.cpp";
  std::ofstream(source) << program_text(bound, o.header, width, tokens, reference, narrow);
  const std::string include = fs::absolute(o.header).parent_path().string();
  int saved_stderr = -1;
  if (!loud) {
    std::fflush(stderr);
    saved_stderr = dup(2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
  }
  const BuildResult r = build_program(source.string(), (work / "check_layer").string(), false,
                                      {include}, {}, {"-g", "-fno-omit-frame-pointer"});
  if (!loud) {
    dup2(saved_stderr, 2);
    close(saved_stderr);
  }
  return r.ok;
}

// Where the report's lines go: stdout for check-layer, a string for a build.
using Say = std::function<void(const std::string&)>;

// The tokens a check runs on where --tokens does not say: two sequences of a
// layer that takes `context` (attention), else 6.
int64_t default_tokens(const std::map<std::string, int64_t>& hyper) {
  auto context = hyper.find("context");
  return context != hyper.end() ? 2 * context->second : 6;
}

// `reference`, when given, gets the type the gradients were checked in
// ("double", or "float" for a layer that does not compile so).
int check_layer(const CheckLayerOptions& o, const Say& say, std::string* reference_used = nullptr) {
  if (o.dtype != "fp32" && o.dtype != "bf16" && o.dtype != "fp16") {
    error(fmt::format("--dtype {}: fp32, bf16 or fp16", o.dtype));
    return kExitUsage;
  }
  std::error_code ec;
  if (!fs::is_regular_file(o.header, ec)) {
    error(fmt::format("'{}' is not a file", o.header));
    return kExitFailed;
  }
  const std::string reader = layer_reader_path();
  if (reader.empty()) {
    error(layers::reader_missing_message());
    return kExitFailed;
  }
  layers::ReadResult read =
      layers::read_layers(reader, o.header, layers::default_layer_cache_dir());
  if (!read.layers) {
    error(fmt::format("cannot read the layers of '{}'", o.header));
    std::fputs(read.diagnostics.c_str(), stderr);
    return kExitFailed;
  }
  const layers::LayerDecl* decl = nullptr;
  std::vector<std::string_view> names;
  for (const layers::LayerDecl& d : *read.layers) {
    names.push_back(d.name);
    if (d.name == o.layer) decl = &d;
  }
  if (!decl) {
    const std::string close = closest_match(o.layer, names);
    error(fmt::format("'{}' declares no layer '{}'{}; it declares {}", o.header, o.layer,
                      close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close),
                      names.empty() ? "none" : quoted_choices(names, " and ")));
    return kExitUsage;
  }
  const auto values = hyper_values(*decl, o.hyper);
  if (!values) return kExitUsage;
  std::string why;
  const std::optional<layers::BoundLayer> bound = layers::bind_layer(*decl, *values, &why);
  if (!bound) {
    error(fmt::format("{} ({}:{}): {}", decl->name, o.header, decl->line, why));
    return kExitFailed;
  }
  int64_t width = 0;
  if (o.width)
    width = *o.width;
  else if (values->count("d_model"))
    width = values->at("d_model");
  if (width < 1) {
    error(
        fmt::format("{} has no hyper-parameter d_model: give the width of its input and output "
                    "with --width N",
                    decl->name));
    return kExitUsage;
  }
  int64_t tokens = o.tokens.value_or(default_tokens(*values));
  if (tokens < 1) {
    error("--tokens must be at least 1");
    return kExitUsage;
  }

  fs::path work = o.keep;
  const bool temporary = work.empty();
  if (temporary) {
    std::string templ = (fs::temp_directory_path() / "fsdpgen-check-layer-XXXXXX").string();
    if (!mkdtemp(templ.data())) {
      error(fmt::format("cannot create a directory in {}: {}", fs::temp_directory_path().string(),
                        std::strerror(errno)));
      return kExitFailed;
    }
    work = templ;
  } else if (fs::create_directories(work, ec); ec) {
    error(fmt::format("--keep {}: {}", o.keep, ec.message()));
    return kExitUsage;
  }
  const std::string narrow = o.dtype == "fp32" ? "" : o.dtype;
  // In double where the layer compiles so (its own code, or kernels it
  // brings); else in float, as it trains.
  std::string reference = "double";
  if (!build(*bound, o, width, tokens, reference, narrow, work, false)) {
    reference = "float";
    say(
        fmt::format("note  {} does not compile with T = double (it calls fsdpgen's fp32/bf16/fp16 "
                    "kernels, or converts with to_float): checked with T = float, as it trains\n",
                    decl->name));
    if (!build(*bound, o, width, tokens, reference, narrow, work, true)) {
      error(
          fmt::format("{} ({}:{}) does not compile in the check program (above: the compiler's "
                      "messages){}",
                      decl->name, o.header, decl->line,
                      narrow.empty() ? "" : fmt::format("; it must compile with T = {}", narrow)));
      if (temporary) fs::remove_all(work, ec);
      return kExitFailed;
    }
  }
  if (reference_used) *reference_used = reference;
  const std::string program = (work / "check_layer").string();
  const std::string log = (work / "report.txt").string();
  const layers::ProcessEnd ran = layers::run_to_file({program}, log, kRunSeconds);
  std::ifstream report(log);
  for (std::string line; std::getline(report, line);) {
    if (line.rfind("@frames", 0) != 0) {
      say(line + "\n");
      continue;
    }
    for (const std::string& at : symbolized(line, program, o.header, work))
      say("      " + at + "\n");
  }
  // The program's own status is the checks' (0 or 1); anything else failed.
  int exit = kExitFailed;
  switch (ran.how) {
    case layers::ProcessEnd::exited:
      if (ran.code == 0) exit = 0;
      break;
    case layers::ProcessEnd::timed_out:
      error(fmt::format("the check program did not finish in {} s: does a call of {} never return?",
                        kRunSeconds, decl->name));
      break;
    case layers::ProcessEnd::killed:
      error(fmt::format("the check program was killed by signal {} ({})", ran.code,
                        strsignal(ran.code)));
      break;
    case layers::ProcessEnd::not_started:
      error(fmt::format("cannot run {}", program));
      break;
  }
  if (temporary) fs::remove_all(work, ec);
  return exit;
}

// A check of the build's: one layer at the spec's values, and the modules it is.
struct SpecLayerCheck {
  CheckLayerOptions options;
  std::vector<std::string> modules;
  std::string values;  // "d_model = 32, d_ff = 128"
};

// The distinct checks of a spec's layers, in block order.
std::vector<SpecLayerCheck> spec_layer_checks(const Spec& spec) {
  std::vector<SpecLayerCheck> checks;
  for (const CustomLayerSpec& c : spec.model.custom) {
    SpecLayerCheck k;
    k.options.header = c.header;
    k.options.layer = c.layer;
    k.options.width = spec.model.width;
    for (const CustomLayerSpec::Hyper& h : c.hyper) {
      k.options.hyper.push_back(fmt::format("{}={}", h.name, h.value));
      k.values += fmt::format("{}{} = {}", k.values.empty() ? "" : ", ", h.name, h.value);
    }
    auto same = [&](const SpecLayerCheck& o) {
      return o.options.header == k.options.header && o.options.layer == k.options.layer &&
             o.options.hyper == k.options.hyper;
    };
    auto it = std::find_if(checks.begin(), checks.end(), same);
    if (it == checks.end()) it = checks.insert(checks.end(), std::move(k));
    it->modules.push_back(c.module);
  }
  return checks;
}

// The cache's name for a passed check: the header's bytes under everything
// else the check depends on (fsdpgen's revision, the layer, its values).
std::optional<std::string> passed_check_name(const SpecLayerCheck& k) {
  std::string bytes, why;
  if (!read_file(k.options.header, bytes, why)) return std::nullopt;
  const std::string context =
      fmt::format("check-layer|{}|{}|{}|width {}", kBuildRevision, k.options.layer,
                  fmt::join(k.options.hyper, " "), k.options.width.value_or(0));
  return "check-" + layers::layer_cache_key(bytes, context) + ".txt";
}

// The report's failed checks ("FAIL  ..." lines and the lines under them).
std::string failed_lines(const std::string& report) {
  std::istringstream in(report);
  std::string out;
  bool under = false;
  for (std::string line; std::getline(in, line);) {
    under = line.rfind("FAIL  ", 0) == 0 || (under && line.rfind("      at ", 0) == 0);
    if (under) out += line + "\n";
  }
  return out;
}

// True when every failed check of `report` is a gradient's: in float (a layer
// that calls fsdpgen's kernels) finite differences at a model's widths are
// noisy, and such a failure alone is a warning (the examples' SwiGluMlp at
// d_model 128, d_ff 344 misses the 1e-2 tolerance on 2 of 144 elements).
bool only_gradients_failed(const std::string& report) {
  const std::string failed = failed_lines(report);
  std::istringstream in(failed);
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("FAIL  ", 0) != 0) continue;
    any = true;
    if (line.rfind("FAIL  gradient ", 0) != 0) return false;
  }
  return any;
}

void warn_float_gradients(const std::string& what, const std::string& report) {
  std::fputs(fmt::format("fsdpgen: warning: {}: bounds, writes and determinism pass, but its "
                         "gradients, checked in float (it does not compile with T = double), "
                         "differ from finite differences at the spec's shapes, where float "
                         "differences are noisy:\n{}  check its gradients at small sizes with "
                         "fsdpgen check-layer\n",
                         what, failed_lines(report))
                 .c_str(),
             stderr);
}

}  // namespace

int run_check_layer(const CheckLayerOptions& o) {
  return check_layer(o, [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  });
}

bool check_spec_layers(const Spec& spec) {
  const std::string cache = layers::default_layer_cache_dir();
  for (const SpecLayerCheck& k : spec_layer_checks(spec)) {
    const std::string what =
        fmt::format("custom layer {} = {}({}) from {}", fmt::join(k.modules, ", "), k.options.layer,
                    k.values, k.options.header);
    const std::optional<std::string> name = passed_check_name(k);
    if (const auto cached = name ? layers::layer_cache_load(cache, *name) : std::nullopt) {
      std::printf("fsdpgen: %s: check-layer's checks passed before (cached in %s)\n", what.c_str(),
                  (std::filesystem::path(cache) / *name).c_str());
      std::fflush(stdout);
      if (only_gradients_failed(*cached)) warn_float_gradients(what, *cached);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    std::string report, reference;
    std::fflush(stdout);
    const int status = check_layer(
        k.options, [&](const std::string& line) { report += line; }, &reference);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool warned = status != 0 && reference == "float" && only_gradients_failed(report);
    if (status == 0 || warned) {
      if (name) layers::layer_cache_store(cache, *name, report);
      std::printf("fsdpgen: %s: check-layer's checks %s (%.1f s)\n", what.c_str(),
                  warned ? "passed but for float gradients (the warning below)" : "passed",
                  seconds);
      std::fflush(stdout);
      if (warned) warn_float_gradients(what, report);
      continue;
    }
    std::string rerun = fmt::format("fsdpgen check-layer {} {} --width {}", k.options.header,
                                    k.options.layer, k.options.width.value_or(0));
    if (!k.options.hyper.empty())
      rerun += " --hyper " + fmt::format("{}", fmt::join(k.options.hyper, " "));
    std::fputs(fmt::format("{}fsdpgen: error: {} fails check-layer's checks at the spec's shapes "
                           "(above); `{}` runs them again; --no-layer-check builds without them\n",
                           report, what, rerun)
                   .c_str(),
               stderr);
    return false;
  }
  std::fflush(stdout);
  return true;
}

Command add_check_layer_command(CLI::App& app) {
  auto o = std::make_shared<CheckLayerOptions>();
  CLI::App* check_layer = app.add_subcommand(
      "check-layer",
      "check a custom layer before it trains: bounds and writes of every member, gradients "
      "against finite differences, determinism, 16-bit against fp32");
  check_layer->add_option("header", o->header, "the layer header")->required();
  check_layer->add_option("layer", o->layer, "the layer's class template")->required();
  check_layer
      ->add_option("--hyper", o->hyper,
                   "each hyper-parameter as name=value (e.g. --hyper d_model=8 d_ff=20)")
      ->expected(1, -1);
  check_layer->add_option("--width", o->width,
                          "the input's and output's width (default: the value of d_model)");
  check_layer->add_option("--tokens", o->tokens,
                          "rows of the input (default: 2 x context where the layer has a "
                          "hyper-parameter so named, else 6)");
  check_layer
      ->add_option("--dtype", o->dtype,
                   "bf16 or fp16: also run the layer in it against the reference (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  check_layer->add_option("--keep", o->keep, "keep the generated check program in this directory");
  check_layer->footer(
      "Exit status: 0 every check passed, 1 a check failed or the layer does not compile, 2 bad "
      "command line.");
  return {check_layer, [o] { return run_check_layer(*o); }};
}

}  // namespace fsdpgen
