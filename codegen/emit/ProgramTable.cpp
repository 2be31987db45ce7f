// ProgramTable: kProgram, the program's settings (model, parallelism,
// training, the plan's figures) and the tables it names, as designated
// initializers; fields a family or spec does not use keep their defaults.
#include <algorithm>

#include <fmt/format.h>

#include "codegen/emit/CppText.h"
#include "codegen/emit/Tables.h"
#include "codegen/planner/Report.h"
#include "codegen/planner/Validation.h"
#include "dsl/Print.h"

namespace fsdpgen::emit {

namespace {

std::string i(int64_t v) {
  return std::to_string(v);
}
std::string b(bool v) {
  return v ? "true" : "false";
}

// A data source as program_data's fields: paths one per line.
std::vector<Init> data_fields(const DataSpec& d) {
  std::string paths;
  for (const std::string& p : d.paths)
    paths += (paths.empty() ? "" : "\n") + p;
  return {{"source", fmt::format("data_source::{}", to_string(d.kind))},
          {"seed", fmt::format("{}", d.seed)},
          {"paths", cpp_string(paths)}};
}

// The id of the schedule's buffer of kind k, or -1 (the last, were there several).
int buffer_of(const EmitContext& c, BufferKind k) {
  int id = -1;
  for (const Buffer& buf : c.s.buffers)
    if (buf.kind == k) id = buf.id;
  return id;
}

std::vector<Init> model_fields(const EmitContext& c) {
  const ModelSpec& m = c.model;
  std::vector<Init> f = {{"vocab", i(m.vocab)},
                         {"context", i(m.context)},
                         {"width", i(m.width)},
                         {"heads", i(m.heads)},
                         {"layers", i(m.layers)},
                         {"ffn_hidden", i(m.ffn_hidden)},
                         {"tied", b(m.tie_embeddings)},
                         {"params", i(c.s.units.total_params)},
                         {"padded_vocab", i(m.padded_vocab())}};
  if (m.family != Family::Llama) return f;  // gpt2 programs leave llama's fields at their defaults
  f.push_back({"family", "model_family::llama"});
  f.push_back({"kv_heads", i(m.kv_heads)});
  f.push_back({"norm_eps", cpp_double(m.norm_eps)});
  std::vector<Init> rope = {{"theta", cpp_double(m.rope_theta)}};
  if (const RopeScalingSpec& r = m.rope_scaling; r.enabled) {
    rope.push_back({"factor", cpp_double(r.factor)});
    if (r.linear) {
      rope.push_back({"linear", "true"});
    } else {
      rope.push_back({"low_freq", cpp_double(r.low_freq)});
      rope.push_back({"high_freq", cpp_double(r.high_freq)});
      rope.push_back({"original_context", i(r.original_context)});
    }
  }
  if (m.rope_local_theta != 0) rope.push_back({"local_theta", cpp_double(m.rope_local_theta)});
  f.push_back({"rope", "", rope});
  if (m.qkv_bias) f.push_back({"qkv_bias", "true"});
  if (m.qk_norm) f.push_back({"qk_norm", "true"});
  if (m.qk_norm_across_heads) f.push_back({"qk_norm_across_heads", "true"});
  if (m.post_norm()) f.push_back({"post_norm", "true"});
  if (m.head_size != 0) f.push_back({"head_dim", i(m.head_size)});
  if (m.sliding_window != 0) f.push_back({"sliding_window", i(m.sliding_window)});
  if (m.scale_embedding) f.push_back({"scale_embedding", "true"});
  if (m.norm_plus_one) f.push_back({"norm_plus_one", "true"});
  if (m.activation == Activation::GeluTanh) f.push_back({"gelu_gate", "true"});
  if (m.attention_softcap != 0) f.push_back({"attention_softcap", cpp_double(m.attention_softcap)});
  if (m.logit_softcap != 0) f.push_back({"logit_softcap", cpp_double(m.logit_softcap)});
  if (m.query_pre_attn_scalar != 0)
    f.push_back({"query_pre_attn_scalar", cpp_double(m.query_pre_attn_scalar)});
  if (m.sandwich_norm()) f.push_back({"sandwich_norm", "true"});
  if (m.global_every != 0) f.push_back({"global_every", i(m.global_every)});
  return f;
}

std::vector<Init> parallel_fields(const EmitContext& c) {
  const ParallelSpec& par = c.spec.parallel;
  const PrecisionSpec& pr = par.precision;
  return {{"world", i(par.world)},
          {"shard_group", i(par.shard_group)},
          {"micro_batches", i(par.accumulate.micro_batches)},
          {"micro_batch", i(c.s.micro_batch)},
          {"precision",
           "",
           {{"param", dtype_enum(pr.param)},
            {"reduce", c.comm ? dtype_enum(pr.reduce) : "dtype_id::fp32"},
            {"master", dtype_enum(pr.master)},
            {"loss_scale",
             "",
             {{"dynamic", b(pr.loss_scale.kind == LossScaleKind::Dynamic)},
              {"init", cpp_double(pr.loss_scale.init)},
              {"interval", i(pr.loss_scale.interval)}}}}},
          {"ranks_per_node", i(par.ranks_per_node)}};
}

std::vector<Init> train_fields(const EmitContext& c) {
  const TrainSpec& t = c.spec.train;
  const OptimizerSpec& o = t.optimizer;
  const LrScheduleSpec& lr = t.lr_schedule;
  std::vector<Init> optimizer = {{"kind", fmt::format("optimizer_kind::{}", to_string(o.kind))},
                                 {"lr", cpp_double(o.lr)},
                                 {"beta1", cpp_double(o.beta1)},
                                 {"beta2", cpp_double(o.beta2)},
                                 {"eps", cpp_double(o.eps)},
                                 {"weight_decay", cpp_double(o.weight_decay)},
                                 {"momentum", cpp_double(o.momentum)}};
  if (o.kind == OptimizerKind::Muon)
    optimizer.insert(optimizer.end(),
                     {{"nesterov", b(o.nesterov)},
                      {"ns_steps", i(o.ns_steps)},
                      {"ns_dtype", dtype_enum(o.ns_dtype)},
                      {"adjust_lr", fmt::format("muon_adjust::{}", to_string(o.adjust_lr))},
                      {"adamw_lr", cpp_double(o.adamw.lr)},
                      {"adamw_beta1", cpp_double(o.adamw.beta1)},
                      {"adamw_beta2", cpp_double(o.adamw.beta2)},
                      {"adamw_eps", cpp_double(o.adamw.eps)},
                      {"adamw_weight_decay", cpp_double(o.adamw.weight_decay)}});
  std::vector<Init> f = {{"optimizer", "", optimizer},
                         {"lr_schedule",
                          "",
                          {{"kind", fmt::format("lr_schedule_kind::{}", to_string(lr.kind))},
                           {"warmup", i(lr.warmup)},
                           {"min_lr", cpp_double(lr.min_lr)}}},
                         {"steps", i(t.steps)},
                         {"clip", cpp_double(t.clip)},
                         {"seed", i(t.seed)},
                         {"data", "", data_fields(t.data)},
                         {"log_every", i(t.log_every)},
                         {"checkpoint",
                          "",
                          {{"every", i(t.checkpoint.enabled ? t.checkpoint.every : 0)},
                           {"dir", cpp_string(t.checkpoint.dir)},
                           {"keep", i(t.checkpoint.keep)}}},
                         {"shuffle", b(t.shuffle)}};
  if (t.val) {
    f.push_back({"val", "", data_fields(*t.val)});
    f.push_back({"val_every", i(t.val_every)});
    f.push_back({"val_sequences", i(t.val_sequences)});
  }
  if (!t.eval.empty()) {
    f.push_back({"eval", cpp_string(t.eval)});
    f.push_back({"eval_every", i(t.eval_every)});
    f.push_back({"eval_examples", i(t.eval_examples)});
  }
  if (t.sample_every > 0) {
    f.push_back({"sample_every", i(t.sample_every)});
    f.push_back({"sample_tokens", i(t.sample_tokens)});
  }
  f.push_back({"stall_timeout_s", cpp_double(t.stall_timeout)});
  if (const GuardSpec& g = t.guard; g.enabled())
    f.push_back({"guard",
                 "",
                 {{"loss_z", cpp_double(g.loss_z)},
                  {"norm_z", cpp_double(g.norm_z)},
                  {"window", i(g.window)},
                  {"max_skips", i(g.max_skips)}}});
  return f;
}

std::vector<Init> plan_fields(const EmitContext& c) {
  std::vector<Init> f = {{"device_arena_bytes", i(c.m.device_arena_bytes)},
                         {"host_arena_bytes", i(c.m.host_arena_bytes)},
                         {"live_peak_bytes", i(c.m.live_peak_bytes)},
                         {"workspace_buffer", i(buffer_of(c, BufferKind::Workspace))},
                         {"flash_attention", b(c.act.flash_attention)}};
  if (c.model.family == Family::Llama)
    f.push_back({"rope_buffer", i(buffer_of(c, BufferKind::RopeTables))});
  f.push_back({"validation_op_count", i(validation_pass(c.s).op_count)});
  if (c.m.red_zone_bytes > 0) f.push_back({"red_zone_bytes", i(c.m.red_zone_bytes)});
  if (const int staging = buffer_of(c, BufferKind::CheckpointStaging); staging >= 0)
    f.push_back({"checkpoint_staging_buffer", i(staging)});
  if (const int momentum = buffer_of(c, BufferKind::MuonMomentum); momentum >= 0)
    f.push_back({"muon_momentum_buffer", i(momentum)});
  return f;
}

}  // namespace

std::string program_table(const EmitContext& c, const ProgramNotes& n) {
  const uint64_t hash =
      fnv1a(print_spec(c.spec) + schedule_text(c.s) + print_memory_plan(c.s, c.m));
  int64_t tensors = 0;
  for (const FlatUnit& f : c.s.units.units)
    tensors += static_cast<int64_t>(f.tensors.size());
  std::vector<Init> all = {{"spec_path", cpp_string(c.path)},
                           {"model_name", cpp_string(c.model.name)},
                           {"schedule_text", "kScheduleText"},
                           {"hash", fmt::format("0x{:016x}ull", hash)},
                           {"model", "", model_fields(c)},
                           {"parallel", "", parallel_fields(c)},
                           {"train", "", train_fields(c)},
                           {"plan", "", plan_fields(c)},
                           {"buffers", "kBuffers"},
                           {"buffer_count", i(static_cast<int64_t>(c.s.buffers.size()))},
                           {"units", "kUnits"},
                           {"unit_count", i(static_cast<int64_t>(c.s.units.units.size()))},
                           {"tensors", "kTensors"},
                           {"tensor_count", i(tensors)},
                           {"ops", "kOps"},
                           {"op_count", i(static_cast<int64_t>(c.s.ops.size()))}};
  if (const std::vector<int> host = host_ops(c); !host.empty()) {
    all.push_back({"host_ops", "kHostOps"});
    all.push_back({"host_op_count", i(static_cast<int64_t>(host.size()))});
  }
  if (c.m.red_zone_bytes > 0) all.push_back({"buffer_life", "kBufferLife"});
  if (!n.inner_red_zones.empty()) {
    all.push_back({"inner_red_zones", "kInnerRedZones"});
    all.push_back({"inner_red_zone_count", i(static_cast<int64_t>(n.inner_red_zones.size()))});
  }
  if (const int n = muon_matrix_count(c); n > 0) {
    all.push_back({"muon_matrices", "kMuonMatrices"});
    all.push_back({"muon_matrix_count", i(n)});
  }
  std::string out = "const program kProgram = {\n";
  for (const Init& f : all)
    out += "    " + one_field(f, 4) + ",\n";
  out += "};\n";
  if (const int workspace = buffer_of(c, BufferKind::Workspace); workspace >= 0 && !c.cuda)
    out += fmt::format(
        "static_assert({} >= kCpuGemmWorkspaceBytes,\n"
        "              \"the planned GEMM workspace is smaller than the runtime needs\");\n",
        c.buf(workspace).bytes);
  return out;
}

}  // namespace fsdpgen::emit
