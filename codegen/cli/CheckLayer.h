// CheckLayer: `fsdpgen check-layer HEADER LAYER`, a user's custom layer
// checked before it trains. It reads the header's declarations with the layer
// reader, binds the hyper-parameters given on the command line, writes a small
// program that includes the header and layers/layer_check.h (every member in
// a guarded mapping of its own; bounds, writes, coverage, gradients against
// finite differences, determinism, 16-bit against the reference), compiles
// it as fsdpgen compiles a training program, runs it, and prints its report
// with each fault's file and line. A build runs the same checks on a spec's
// layers (check_spec_layers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cli/Command.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Adds `check-layer` and its flags to `app`.
Command add_check_layer_command(CLI::App& app);

struct CheckLayerOptions {
  std::string header;              // the layer header
  std::string layer;               // the class template's name
  std::vector<std::string> hyper;  // "name=value", one per hyper-parameter
  std::optional<int64_t> width;    // d_in = d_out; default: the hyper-parameter d_model
  std::optional<int64_t>
      tokens;                  // default: 2 x context where a hyper-parameter is so named, else 6
  std::string dtype = "fp32";  // bf16 or fp16: also compare a 16-bit instance
  std::string keep;            // keep the generated program in this directory
};

// Returns the exit status: 0 every check passed, 1 a check failed or the
// layer does not compile or run, 2 a bad command line.
int run_check_layer(const CheckLayerOptions& options);

// The build's check of a spec's custom layers (`fsdpgen SPEC -o train`, off
// with --no-layer-check): check-layer's checks (bounds, overwrite and
// accumulate, gradients against finite differences, determinism; fp32) on
// each distinct layer of spec.model.custom at the spec's values (its bound
// hyper-parameters, the model's width, check-layer's default tokens). A
// layer that passed is kept in the layer cache under its header's bytes and
// those values, so a rebuild checks it no more. Prints a line per layer; for
// one that fails, check-layer's report and the error, and returns false.
bool check_spec_layers(const Spec& spec);

}  // namespace fsdpgen
