// flags: the generated binary's command-line checks, with errors that name the
// flag, the form it expects, and for an unknown flag the nearest valid one.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

// A whole number >= min_value, e.g. "a whole number >= 0"; "5x", "1.5" and
// numbers beyond int64 are refused.
CLI::Validator whole_number(int64_t min_value);

// A finite number > 0, e.g. "0.5" or "2".
CLI::Validator positive_number();

// The one-line message for a failed parse of app's arguments, e.g. "unknown
// flag --step; did you mean --steps?" or "--steps: expected a whole number
// >= 0, got '5x'".
std::string flag_error_message(const CLI::App& app, const CLI::ParseError& e);
