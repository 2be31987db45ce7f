// fsdpgen:begin header
// The template of every generated training program: fsdpgen replaces each
// region below with the spec's planned schedule. As it stands it is a valid
// program for an empty schedule, so that it compiles on its own (a test
// checks that).
// fsdpgen:end header
#include <cstdint>
#include <cstring>

// fsdpgen:begin includes
#include "runtime/cpu/gpt2.h"
#include "runtime/cpu/step.h"
#include "runtime/program.h"
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
    .spec_path = "template",
    .model_name = "template",
    .schedule_text = kScheduleText,
    .hash = 0,
    .model = {.vocab = 256,
              .context = 1,
              .width = 16,
              .heads = 1,
              .layers = 0,
              .ffn_hidden = 64,
              .tied = true,
              .params = 0,
              .padded_vocab = 256},
    .parallel = {.world = 1,
                 .shard_group = 1,
                 .micro_batches = 1,
                 .micro_batch = 1,
                 .precision = {.param = dtype_id::fp32,
                               .reduce = dtype_id::fp32,
                               .master = dtype_id::fp32,
                               .loss_scale = {.dynamic = true, .init = 65536.0, .interval = 2000}}},
    .train = {.optimizer = {.kind = optimizer_kind::adamw,
                            .lr = 1e-3,
                            .beta1 = 0.9,
                            .beta2 = 0.95,
                            .eps = 1e-8,
                            .weight_decay = 0.0,
                            .momentum = 0.0},
              .lr_schedule = {.kind = lr_schedule_kind::constant, .warmup = 0, .min_lr = 0.0},
              .steps = 0,
              .clip = 0.0,
              .seed = 0,
              .data = {.source = data_source::synthetic, .seed = 0, .paths = ""},
              .log_every = 1,
              .checkpoint = {.every = 0, .dir = "ckpt", .keep = 2}},
    .plan = {.device_arena_bytes = 0,
             .host_arena_bytes = 0,
             .live_peak_bytes = 0,
             .workspace_buffer = -1,
             .flash_attention = false},
    .buffers = nullptr,
    .buffer_count = 0,
    .units = nullptr,
    .unit_count = 0,
    .tensors = nullptr,
    .tensor_count = 0,
    .ops = nullptr,
    .op_count = 0,
};
// fsdpgen:end tables

}  // namespace

// fsdpgen:begin main
int main(int argc, char** argv) {
  return train_main(kProgram, argc, argv);
}
// fsdpgen:end main
