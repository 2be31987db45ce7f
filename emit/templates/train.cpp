// fsdpgen:begin header
// The template of every generated training program: fsdpgen replaces each
// region below with the spec's planned schedule. As it stands it is a valid
// program for an empty schedule, so that it compiles on its own (a test
// checks that).
// fsdpgen:end header
#include <cstdint>
#include <cstring>

// fsdpgen:begin includes
#include "runtime/gpt2.h"
#include "runtime/program.h"
#include "runtime/step.h"
// fsdpgen:end includes

namespace {

// fsdpgen:begin types
using param_t = float;  // params and activations
using grad_t = float;   // unsharded gradients
// fsdpgen:end types

// fsdpgen:begin model
[[maybe_unused]] constexpr gpt2_dims kDims{1, 1, 16, 1, 64, 256, false, 256};
// fsdpgen:end model

// Free ops release buffers; the executor does the accounting.
[[maybe_unused]] void op_free(step_context&) {}

// fsdpgen:begin ops
// fsdpgen:end ops

// fsdpgen:begin tables
constexpr const char* kScheduleText = "";
const program kProgram = {
    "template", "template", kScheduleText, 0,  // origin
    256, 1, 16, 1, 0, 64, true, 0, 256,        // model
    1, 1, 1, 1, dtype_id::fp32, dtype_id::fp32, dtype_id::fp32,
    true, 65536.0, 2000,  // loss scale
    optimizer_kind::adamw, 1e-3, 0.9, 0.95, 1e-8, 0.0, 0.0,
    lr_schedule_kind::constant, 0, 0.0, 0, 0.0, 0, data_source::synthetic, 0, "", 1,
    0, "ckpt", 2,  // checkpoints
    0, 0, 0, -1, false,  // arenas, workspace, flash attention
    nullptr, 0, nullptr, 0, nullptr, 0, nullptr, 0};
// fsdpgen:end tables

}  // namespace

// fsdpgen:begin main
int main(int argc, char** argv) { return train_main(kProgram, argc, argv); }
// fsdpgen:end main
