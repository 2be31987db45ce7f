// Template: strict filling of the C++ templates in templates/. A template is
// a real, compilable source file; a region to replace is a pair of whole
// lines `// fsdpgen:begin NAME` ... `// fsdpgen:end NAME`, whose contents
// (placeholder code that keeps the template compilable) are replaced by the
// value of NAME. An unknown region, a value no region uses, a region given
// twice, an unterminated or nested region, or any other line mentioning
// "fsdpgen:" is an error.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fsdpgen {

struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `values` maps region names to replacement text (which should end in a newline).
std::string fill_template(std::string_view template_name, std::string_view text,
                          const std::map<std::string, std::string>& values);

// Templates embedded at build time (templates/*.cpp), by file name.
std::string_view embedded_template(std::string_view name);

}  // namespace fsdpgen
