// run_log: the banner, step lines, metrics lines and summary of a training run.
#include "runtime/train/run_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "runtime/human.h"
#include "runtime/optimizer.h"

namespace {

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02.0f}s", static_cast<int>(s / 60), std::fmod(s, 60));
  return fmt::format("{}h{:02}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}

// How the embedding is stored, when its vocabulary is padded ("" when not).
std::string vocab_padding_note(const program& p) {
  if (p.model.padded_vocab <= p.model.vocab) return "";
  return fmt::format(
      "; vocab {} stored padded to {} rows: {} zero elements, not parameters", p.model.vocab,
      p.model.padded_vocab,
      with_commas((p.model.padded_vocab - p.model.vocab) * p.model.width * (p.model.tied ? 1 : 2)));
}

// A loss or norm for JSON, which has no inf or NaN: null when not finite.
std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null";
}

// The metrics line's straggler field, after a comma.
std::string straggler_json(const straggler_report& s) {
  return fmt::format(
      ", \"straggler\": {{\"rank\": {}, \"busy_s\": {:.6f}, \"median_rank\": {}, "
      "\"median_busy_s\": {:.6f}, \"step_s\": {:.6f}, \"op_kind\": \"{}\", \"lost_s\": {:.6f}}}",
      s.rank, s.busy_s, s.median_rank, s.median_busy_s, s.step_s, op_kind_name(s.kind), s.lost_s);
}

const char* sharding_of(const program& p) {
  if (p.parallel.shard_group == 1)
    return p.parallel.world == 1 ? "single rank" : "no_shard (replicated)";
  return p.parallel.shard_group == p.parallel.world ? "sharded over the world" : "hybrid";
}

}  // namespace

void run_log_banner(const program& p, const run_banner& b) {
  std::printf("fsdpgen train: %s (%s params%s) from %s\n", p.model_name,
              with_commas(p.model.params).c_str(), vocab_padding_note(p).c_str(), p.spec_path);
  std::printf("  %lld rank%s (%s, shard group %lld), launched by %s, %s\n",
              static_cast<long long>(p.parallel.world), p.parallel.world == 1 ? "" : "s",
              sharding_of(p), static_cast<long long>(p.parallel.shard_group), b.launcher.c_str(),
              b.backend.c_str());
  if (p.parallel.world > 1) std::printf("  placement: %s\n", b.placement.c_str());
  std::printf(
      "  params %s, reduce %s, master %s | %lld micro-batch%s of %lld x %lld tokens | "
      "%s tokens per step\n",
      dtype_name(p.parallel.precision.param), dtype_name(p.parallel.precision.reduce),
      dtype_name(p.parallel.precision.master), static_cast<long long>(p.parallel.micro_batches),
      p.parallel.micro_batches == 1 ? "" : "es", static_cast<long long>(p.parallel.micro_batch),
      static_cast<long long>(p.model.context), with_commas(b.tokens_per_step).c_str());
  std::printf("  data: %s | weights: %s\n", b.data.c_str(), b.weights_from.c_str());
  if (!b.val.empty()) std::printf("  val: %s\n", b.val.c_str());
  std::printf("  lr: %s\n", optimizer_lr_describe(p, b.steps).c_str());
  if (b.ckpt.every > 0)
    std::printf("  checkpoints: every %lld steps and at the end, in %s (newest %lld kept), %s\n",
                static_cast<long long>(b.ckpt.every), b.ckpt.dir.c_str(),
                static_cast<long long>(b.ckpt.keep), b.ckpt_written.c_str());
  if (b.resumed && b.start_step >= b.steps)
    std::printf(
        "  the checkpoint is at step %lld and the run has %lld steps: nothing to train "
        "(--steps N trains further)\n",
        static_cast<long long>(b.start_step), static_cast<long long>(b.steps));
  else if (b.steps == 0)
    std::printf(
        "  the run has 0 steps: nothing to train (the weights it was given are evaluated "
        "where validation is on, and written by --save)\n");
  std::printf("  arena %.2f MiB per rank (planned peak %.2f MiB)%s\n",
              mib(p.plan.device_arena_bytes), mib(p.plan.live_peak_bytes),
              p.plan.host_arena_bytes
                  ? fmt::format(", host {:.2f} MiB", mib(p.plan.host_arena_bytes)).c_str()
                  : "");
  if (p.plan.red_zone_bytes > 0)
    std::printf(
        "  built with --check: %lld-byte red zones around every buffer and after every custom "
        "layer array, checked after each op; ops run one at a time, under AddressSanitizer "
        "(slower: for finding memory bugs, not for training)\n",
        static_cast<long long>(p.plan.red_zone_bytes));
  std::fflush(stdout);
}

void run_log_metrics_line(std::FILE* f, const step_record& r) {
  const memory_reading& m = r.machine;
  std::fprintf(
      f,
      "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, \"ms\": "
      "%.3f, \"host_resident_bytes\": %lld, \"arena_resident_bytes\": %lld, "
      "\"arena_growth_bytes\": %lld%s%s, "
      "\"skipped\": %s, \"loss_scale\": %.9g, \"tokens_per_s\": %.1f, \"epoch\": "
      "%lld%s%s%s%s%s%s}\n",
      static_cast<long long>(r.step + 1), json_number(r.loss).c_str(), r.lr,
      json_number(r.grad_norm).c_str(), r.seconds * 1e3,
      static_cast<long long>(m.host_resident_bytes), static_cast<long long>(m.arena_resident_bytes),
      static_cast<long long>(m.arena_growth_bytes),
      m.set_up_beside_arena_bytes == kNotMeasuredBytes
          ? ""
          : fmt::format(", \"set_up_beside_arena_bytes\": {}", m.set_up_beside_arena_bytes).c_str(),
      m.device_used_bytes < 0
          ? ""
          : fmt::format(", \"device_used_bytes\": {}, \"device_arena_bytes\": {}",
                        m.device_used_bytes, m.device_arena_bytes)
                .c_str(),
      r.skipped ? "true" : "false", r.loss_scale, r.tokens_per_s, static_cast<long long>(r.epoch),
      r.validated ? fmt::format(", \"val_loss\": {}", json_number(r.val_loss)).c_str() : "",
      r.straggler ? straggler_json(*r.straggler).c_str() : "",
      r.checkpoint_stall_s >= 0
          ? fmt::format(", \"checkpoint_stall_s\": {:.6f}", r.checkpoint_stall_s).c_str()
          : "",
      r.skipped_spike >= 0 ? fmt::format(", \"skipped_spike\": {}", r.skipped_spike).c_str() : "",
      r.eval
          ? fmt::format(", \"eval_acc\": {}, \"eval_acc_norm\": {}, \"eval_examples\": {}",
                        json_number(r.eval->acc), json_number(r.eval->acc_norm), r.eval->examples)
                .c_str()
          : "",
      r.samples.empty()
          ? ""
          : fmt::format(", \"samples\": {}", nlohmann::json(r.samples).dump()).c_str());
  std::fflush(f);
}

int64_t run_log_metrics_resume(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept, line;
  int64_t dropped = 0;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    long long at = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %lld,", &at) != 1 || at < 1)
      throw std::runtime_error(fmt::format(
          "--metrics {}: line {} is not a metrics line (one JSON object a step, from \"step\"); "
          "not appending to it: pass another --metrics file",
          path, n));
    if (at <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (dropped == 0) return 0;
  const std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::trunc);
  out << kept;
  out.close();
  if (!out || std::rename(partial.c_str(), path.c_str()) != 0)
    throw std::runtime_error(
        fmt::format("--metrics {}: cannot rewrite it: {}", path, std::strerror(errno)));
  return dropped;
}

void run_log_step(const step_record& r, int64_t steps, int64_t tokens_per_step, double eta_seconds,
                  const loss_scaler& scaler) {
  const memory_reading& m = r.machine;
  std::printf(
      "step %*lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %s tok/s | %s %.2f "
      "MiB | eta %s%s%s\n",
      static_cast<int>(std::to_string(steps).size()), static_cast<long long>(r.step + 1),
      static_cast<long long>(steps), r.loss, r.lr, r.grad_norm, r.seconds * 1e3,
      with_commas(static_cast<int64_t>(static_cast<double>(tokens_per_step) / r.seconds)).c_str(),
      m.device_used_bytes < 0 ? "rss" : "gpu",
      mib(m.device_used_bytes < 0 ? m.host_resident_bytes : m.device_used_bytes),
      duration(eta_seconds).c_str(),
      scaler.enabled ? fmt::format(" | scale {:g}", r.loss_scale).c_str() : "",
      !r.skipped ? ""
      : r.spike  ? " | skipped (loss spike)"
                 : " | skipped (non-finite gradients)");
  std::fflush(stdout);
}

void run_log_straggler(const step_record& r) {
  const straggler_report& s = *r.straggler;
  std::printf(
      "straggler at step %lld: rank %lld busy %.1f ms against %.1f ms on the median rank (%lld), "
      "%.2fx; most of it in %s (+%.1f ms)\n",
      static_cast<long long>(r.step + 1), static_cast<long long>(s.rank), s.busy_s * 1e3,
      s.median_busy_s * 1e3, static_cast<long long>(s.median_rank),
      s.median_busy_s > 0 ? s.busy_s / s.median_busy_s : 0.0, op_kind_name(s.kind), s.lost_s * 1e3);
  std::fflush(stdout);
}

void run_log_val(const val_record& v, int64_t steps) {
  std::printf("step %*lld/%lld | val loss %.6f | %s sequences in %.2f s\n",
              static_cast<int>(std::to_string(steps).size()), static_cast<long long>(v.step),
              static_cast<long long>(steps), v.loss, with_commas(v.sequences).c_str(), v.seconds);
  std::fflush(stdout);
}

void run_log_eval(const eval_record& e, int64_t steps) {
  std::printf("step %*lld/%lld | %s acc %.4f acc_norm %.4f (%s examples) in %.2f s\n",
              static_cast<int>(std::to_string(steps).size()), static_cast<long long>(e.step),
              static_cast<long long>(steps), e.name.c_str(), e.acc, e.acc_norm,
              with_commas(e.examples).c_str(), e.seconds);
  std::fflush(stdout);
}

void run_log_summary(const run_totals& t, int64_t tokens_per_step, const std::string& memory_lines,
                     const loss_scaler& scaler) {
  const double per_step =
      t.timed_steps ? t.timed_seconds / static_cast<double>(t.timed_steps) : t.total_seconds;
  std::printf(
      "done: %lld step%s in %.1f s | loss %.4f -> %.4f%s | %.1f ms/step | %s tok/s\n%s",
      static_cast<long long>(t.steps_run), t.steps_run == 1 ? "" : "s", t.total_seconds,
      t.first_loss, t.last_loss,
      !t.validated ? ""
      : t.last_val_step == t.last_step
          ? fmt::format(" | val loss {:.4f}", t.last_val_loss).c_str()
          : fmt::format(" | val loss {:.4f} at step {}", t.last_val_loss, t.last_val_step).c_str(),
      per_step * 1e3,
      with_commas(static_cast<int64_t>(static_cast<double>(tokens_per_step) / per_step)).c_str(),
      memory_lines.c_str());
  if (const int64_t n = t.skipped - t.skipped_spike; n > 0)
    std::printf("%lld step%s skipped for non-finite gradients%s\n", static_cast<long long>(n),
                n == 1 ? "" : "s",
                scaler.enabled ? fmt::format(" (loss scale now {:g})", scaler.scale).c_str() : "");
  if (t.skipped_spike > 0)
    std::printf("%lld step%s left out by the loss-spike guard\n",
                static_cast<long long>(t.skipped_spike), t.skipped_spike == 1 ? "" : "s");
}
