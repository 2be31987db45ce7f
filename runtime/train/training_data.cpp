// training_data: a run's training and validation data, opened and checked,
// the rows each step and validation pass reads (training_inputs), and where a
// step's rows were read from (runtime/train/training_data.h).
#include "runtime/train/training_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include "runtime/comm.h"
#include "runtime/human.h"

// A spec's data source (paths one per line), or what a flag gave instead:
// "synthetic", one text file, or token files and glob patterns (.bin).
// `given`: the flag as given to this launch (not taken back from a checkpoint).
// Bytes into a larger vocabulary than theirs are allowed when the spec's
// source is read (fsdpgen refused it unless the spec allowed it), when a
// checkpoint's run is (its launch was checked), or with --allow-bytes.
data_config data_config_of(const program& p, const program_data& spec,
                           const std::vector<std::string>& flag,
                           const std::vector<std::string>& given, bool allow_bytes, bool shuffle,
                           const char* role) {
  data_config d;
  d.vocab = p.model.vocab;
  d.context = p.model.context;
  d.seed = static_cast<uint64_t>(spec.seed);
  d.kind = spec.source == data_source::synthetic ? data_kind::synthetic
           : spec.source == data_source::text    ? data_kind::text
                                                 : data_kind::tokens;
  for (const char* at = spec.paths; *at;) {
    const char* end = std::strchr(at, '\n');
    d.paths.emplace_back(at, end ? end : at + std::strlen(at));
    at = end ? end + 1 : at + std::strlen(at);
  }
  if (!flag.empty()) {
    d.paths.clear();
    if (flag.size() == 1 && flag[0] == "synthetic") {
      d.kind = data_kind::synthetic;
    } else {
      auto is_bin = [](const std::string& f) {
        return f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0;
      };
      d.kind = flag.size() == 1 && !is_bin(flag[0]) ? data_kind::text : data_kind::tokens;
      d.paths = flag;
    }
  }
  d.shuffle = shuffle && d.kind != data_kind::synthetic;
  d.role = role;
  d.allow_bytes = allow_bytes || given.empty();
  return d;
}

void training_data::open(const run_shape& s, int64_t val_every, int64_t& val_sequences) {
  inputs.data = &data;
  inputs.val = &val;
  std::string error;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    data = dataloader_open(data_config_of(s.p, s.p.train.data, s.run.data, s.o.run.data,
                                          s.o.allow_bytes, s.run.shuffle, "data"));
    open_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::exception& e) {
    error = e.what();
    if (s.run.data.empty())
      error += fmt::format(
          " (the data of {}, found from that spec's directory as fsdpgen was given it: run "
          "where fsdpgen ran, or pass --data FILES)",
          s.p.spec_path);
  }
  if (error.empty() && val_every > 0) {
    if (!program_has_val(s.p) && s.run.val.empty())
      error = fmt::format(
          "--val-every {}: the spec names no validation data; pass --val FILES as well", val_every);
    try {
      if (error.empty()) {
        val = dataloader_open(data_config_of(s.p, s.p.train.val, s.run.val, s.o.run.val,
                                             s.o.allow_bytes, false, "val"));
        const int64_t have = dataloader_sequences(val);
        if (have > 0 && have < val_sequences) {
          if (s.lead)
            std::printf(
                "note: val: %s: fewer than the %s sequences of val_sequences; each "
                "validation reads all %s\n",
                dataloader_describe(val).c_str(), with_commas(val_sequences).c_str(),
                with_commas(have).c_str());
          val_sequences = have;
        }
        warn_if_val_is_trained_on(s.lead);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty() && !s.o.trace_data.empty()) {
    trace.reset(std::fopen(s.o.trace_data.c_str(), "a"));  // every rank appends whole lines
    if (!trace)
      error = fmt::format("--trace-data {}: cannot write there: {}", s.o.trace_data,
                          std::strerror(errno));
    else
      inputs.trace_fd = fileno(trace.get());
  }
  agree_on_error(error, "opening the data");
}

void training_inputs::fill(const step_context& c, int64_t mb, int32_t* tokens,
                           int32_t* targets) const {
  const program& p = *c.p;
  const bool validation = c.validation_pass >= 0;
  const data_trace trace{trace_fd, validation ? "val" : "train",
                         validation ? c.validation_pass : c.step, c.comms.rank, mb};
  const data_trace* traced = trace_fd >= 0 ? &trace : nullptr;
  if (validation) {
    // Synthetic validation data: the same stream's sequences from 2^60 on,
    // which no run trains on (they hold the same statistics, unseen).
    constexpr int64_t kSyntheticHeldOut = int64_t{1} << 60;
    const int64_t first =
        (c.validation_pass * p.parallel.world + c.comms.rank) * p.parallel.micro_batch +
        (val->config.kind == data_kind::synthetic ? kSyntheticHeldOut : 0);
    dataloader_fill(*val, first, p.parallel.micro_batch, tokens, targets, traced);
    return;
  }
  // The step's global batch is world * micro_batches * micro_batch sequences;
  // rank r's micro-batch m is its (r * micro_batches + m)-th slice, so any
  // world and accumulation see the same sequences in each step.
  int64_t slice = c.comms.rank * p.parallel.micro_batches + mb;
  int64_t first =
      c.sequence_base + c.step * program_global_batch(p) + slice * p.parallel.micro_batch;
  dataloader_fill(*data, first, p.parallel.micro_batch, tokens, targets, traced);
}

// Where each rank's rows of `step` are read from, one rank a line.
std::string training_data::rows_of_step(const program& p, int64_t sequence_base,
                                        int64_t step) const {
  std::string out;
  for (int64_t rank = 0; rank < p.parallel.world; ++rank)
    out += rows_of_rank(p, sequence_base, step, rank);
  return out;
}

// Rank `rank`'s rows of `step` (step_fill_inputs reads them): one line, the
// first kRowsNamedPerRank located (a large batch's line stays readable; the
// sequence range names them all).
std::string training_data::rows_of_rank(const program& p, int64_t sequence_base, int64_t step,
                                        int64_t rank) const {
  constexpr int64_t kRowsNamedPerRank = 8;
  const int64_t M = p.parallel.micro_batches, B = p.parallel.micro_batch;
  const int64_t first = sequence_base + step * program_global_batch(p) + rank * M * B, rows = M * B;
  std::string out = fmt::format("  rank {}: sequences {}..{}:", rank, first, first + rows - 1);
  for (int64_t j = first; j < first + std::min(rows, kRowsNamedPerRank); ++j)
    out += (j == first ? " " : "; ") + dataloader_locate(data, j);
  if (rows > kRowsNamedPerRank) out += fmt::format("; {} more", rows - kRowsNamedPerRank);
  return out + "\n";
}

// A validation file that is also a training file is not held out: said once.
void training_data::warn_if_val_is_trained_on(bool lead) const {
  if (!lead) return;
  for (const mapped_file& v : val.files)
    for (const mapped_file& t : data.files) {
      std::error_code ec;
      if (!std::filesystem::equivalent(v.path, t.path, ec)) continue;
      std::printf(
          "warning: val: %s is also a training file: validation reads sequences the run trains "
          "on, so its loss is not a held-out loss\n",
          v.path.c_str());
      break;
    }
}
