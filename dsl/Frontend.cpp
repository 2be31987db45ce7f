// Frontend: read -> lex+parse -> check.
#include "dsl/Frontend.h"

#include <filesystem>

#include <fmt/format.h>

#include "dsl/Check.h"
#include "dsl/Diagnostics.h"
#include "dsl/Parser.h"

namespace fsdpgen {

FrontendResult load_spec_text(const std::string& name, std::string text,
                              const SpecOverrides& overrides) {
  SourceFile file(name, std::move(text));
  Diagnostics diags(file);
  ast::File tree = parse(file, diags);
  FrontendResult r;
  // Semantic checks run even after syntax errors, so that one run reports both.
  std::optional<Spec> spec =
      check(tree, diags, overrides, std::filesystem::path(name).parent_path().string());
  if (!diags.has_errors()) r.spec = std::move(spec);
  r.diagnostics = diags.render();
  return r;
}

FrontendResult load_spec_file(const std::string& path, const SpecOverrides& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return {std::nullopt, fmt::format("error: '{}' is a directory, not a spec file\n", path)};
  std::string text, error;
  if (!read_file(path, text, error))
    return {std::nullopt, fmt::format("error: cannot read spec file '{}': {}\n", path, error)};
  FrontendResult r = load_spec_text(path, std::move(text), overrides);
  // A data file named by a relative path is found from the spec's directory,
  // as a compiler finds an #include from the including file. The result is
  // as relative as the spec's own path (specs/input.txt for specs/x.fsdp), so
  // that what fsdpgen emits does not depend on where the tree is checked out.
  if (r.spec) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    auto resolve = [&](DataSpec& d) {
      for (std::string& file : d.paths)  // a glob pattern too: its directory part is a path
        if (std::filesystem::path(file).is_relative())
          file = (dir / file).lexically_normal().string();
    };
    resolve(r.spec->train.data);
    if (r.spec->train.val) resolve(*r.spec->train.val);
    if (std::string& eval = r.spec->train.eval;
        !eval.empty() && std::filesystem::path(eval).is_relative())
      eval = (dir / eval).lexically_normal().string();
  }
  return r;
}

}  // namespace fsdpgen
