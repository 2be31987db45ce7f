// training_samples: every sample_every steps, rank 0 prints a few
// generations from the document start (as llm.c prints its samples) and
// adds them to the step's --metrics line. The weights come to rank 0 between
// steps: each rank of the first shard group hands its fp32 shard of every
// unit through backend::with_host_weights (the arena itself on the CPU, a
// host copy on a GPU) to one MPI gather into a buffer rank 0 allocated at
// set-up, before the arena, with the generator's KV cache and scratch
// (runtime/generate/generator.h); a sample allocates only its ids and texts,
// and the other ranks wait for rank 0 in the error agreement that ends it
// (runtime/train/training_samples.h).
#include "runtime/train/training_samples.h"

#include <glob.h>
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/comm.h"
#include "runtime/files/hf_model_of.h"
#include "runtime/files/token_manifest.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/token_decoder.h"
#include "runtime/human.h"
#include "runtime/train/training_data.h"
#include "runtime/train/weights.h"

// Rank 0's: the gathered weights, the generator over them and the decoder.
struct training_sampler {
  std::vector<float> weights;  // every unit's padded flat parameter, in unit order
  std::vector<int64_t> unit_offset;
  std::unique_ptr<generator> gen;
  token_decoder decoder;
  bool has_decoder = false;  // else the samples are ids
  std::string decoded_by;    // the tokenizer.json, "bytes" or ""
  std::string as_ids_why;    // why the samples are ids (no decoder)
  int32_t start = 0;         // the document-start token
  std::string start_text;
  int64_t tokens = 0;
};

namespace {

// Generations printed at each sample point.
constexpr int kSamplesPerPoint = 2;

// The first file of the run's training data, "" when it is no token files.
std::string first_token_file(const data_config& d) {
  if (d.kind != data_kind::tokens) return "";
  for (const std::string& pattern : d.paths) {
    glob_t g{};
    const bool found = ::glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
    const std::string first = found ? g.gl_pathv[0] : "";
    ::globfree(&g);
    if (found) return first;
  }
  return "";
}

}  // namespace

void training_samples::open(const run_shape& rs) {
  const program& p = rs.p;
  const train_options& o = rs.o;
  every = o.sample_every >= 0 ? o.sample_every : p.train.sample_every;
  if (every <= 0) return;
  std::string error;
  if (rs.lead) {
    try {
      auto s = std::make_shared<training_sampler>();
      const hf_model m = hf_model_of(p.model);
      // Each generation starts from one token and may fill the context.
      s->tokens =
          std::min(o.sample_tokens > 0 ? o.sample_tokens : p.train.sample_tokens, m.context - 1);
      int64_t elems = 0;
      for (int u = 0; u < p.unit_count; ++u) {
        s->unit_offset.push_back(elems);
        elems += p.units[u].padded_elems;
      }
      s->weights.assign(static_cast<size_t>(elems), 0.0f);
      generate_tensors views;
      for (int i = 0; i < p.tensor_count; ++i) {
        const program_tensor& t = p.tensors[i];
        views[t.name] = {
            s->weights.data() + s->unit_offset[static_cast<size_t>(t.unit)] + t.offset_elems,
            t.shape()};
      }
      s->gen = std::make_unique<generator>(m, views);
      const data_config d =
          data_config_of(p, p.train.data, rs.run.data, o.run.data, o.allow_bytes, false, "data");
      const std::string file = first_token_file(d);
      const std::optional<token_set_tokenizer> tok =
          file.empty() ? std::nullopt : token_set_tokenizer_of(file);
      if (tok && !tok->tokenizer_json.empty()) {
        // A tokenizer the decoder cannot read costs the samples their text,
        // not the run: they print as ids, and the banner says why.
        try {
          s->decoder = token_decoder::from_file(tok->tokenizer_json);
          s->has_decoder = true;
          s->decoded_by = tok->tokenizer_json;
        } catch (const std::exception& e) {
          s->as_ids_why = e.what();
        }
        s->start = static_cast<int32_t>(tok->bos_id >= 0 ? tok->bos_id : tok->eot_id);
        s->start_text = tok->bos_id >= 0 ? tok->bos : tok->eot;
      } else if (m.vocab == 256) {
        s->decoder = token_decoder::bytes();
        s->has_decoder = true;
        s->decoded_by = "bytes";
        s->start = '\n';
        s->start_text = "a newline";
      } else {
        s->start = !m.llama && m.vocab >= 50257 ? 50256 : 0;
        s->start_text = fmt::format("id {}", s->start);
      }
      if (s->start < 0 || s->start >= m.vocab)
        throw std::runtime_error(
            fmt::format("the document-start token {} is outside the "
                        "vocabulary of {}",
                        s->start, m.vocab));
      sampler = std::move(s);
    } catch (const std::exception& e) {
      error = fmt::format("samples (sample_every {}): {}", every, e.what());
    }
  }
  agree_on_error(error, "set-up");
}

std::string training_samples::banner() const {
  if (!sampler) return "";
  const training_sampler& s = *sampler;
  const int64_t bytes = static_cast<int64_t>(s.weights.size() * sizeof(float)) + s.gen->bytes();
  return fmt::format(
      "samples: every {} steps, {} of {} tokens from {} (temperature 1), {}; rank 0 holds {:.2f} "
      "MiB for them beside the arena (the weights gathered, fp32, and the KV cache), allocated "
      "before it",
      every, kSamplesPerPoint, s.tokens, s.start_text,
      s.has_decoder ? "decoded by " + s.decoded_by
      : s.as_ids_why.empty()
          ? std::string("printed as ids (no tokenizer.json beside the training data's manifest)")
          : "printed as ids (" + s.as_ids_why + ")",
      mib(bytes));
}

bool training_samples::due(int64_t steps_done) const {
  return every > 0 && steps_done % every == 0;
}

std::vector<std::string> training_samples::sample(const run_shape& rs, step_context& c, backend& b,
                                                  int64_t seed, int64_t steps_done) {
  const program& p = rs.p;
  const bool lead = rs.lead;
  // Ranks of the first shard group hold every shard once; rank 0 is one of them.
  std::string error;
  if (c.comms.replica_rank == 0) {
    const MPI_Comm comm =
        c.comms.comm[static_cast<int>(stream_id::compute)][static_cast<int>(comm_group::shard)];
    b.with_host_weights(c, false, [&] {
      for (int u = 0; u < p.unit_count; ++u) {
        const int64_t n = p.units[u].shard_elems;
        if (n > INT_MAX) {
          error = fmt::format("unit {}'s shard of {} elements is too large to gather", u, n);
          return;  // every rank of the group sees the same n
        }
        float* to =
            lead ? sampler->weights.data() + sampler->unit_offset[static_cast<size_t>(u)] : nullptr;
        MPI_Gather(weights_fp32_shard(c, u), static_cast<int>(n), MPI_FLOAT, to,
                   static_cast<int>(n), MPI_FLOAT, 0, comm);
      }
    });
  }
  std::vector<std::string> texts;
  if (lead && error.empty()) {
    training_sampler& s = *sampler;
    std::printf("step %lld | samples from %s:\n", static_cast<long long>(steps_done),
                s.start_text.c_str());
    for (int k = 0; k < kSamplesPerPoint; ++k) {
      sample_settings settings;
      settings.seed = static_cast<uint64_t>(seed + steps_done * kSamplesPerPoint + k);
      const int32_t start = s.start;
      const std::vector<int32_t> ids = s.gen->generate({&start, 1}, s.tokens, settings);
      std::string text;
      if (s.has_decoder) {
        text = s.decoder.decode(ids);
      } else {
        for (int32_t id : ids) {
          if (!text.empty()) text += ' ';
          text += std::to_string(id);
        }
      }
      std::printf("--- sample %d/%d\n", k + 1, kSamplesPerPoint);
      std::fwrite(text.data(), 1, text.size(), stdout);  // all of it: bytes may hold a NUL
      std::printf("\n");
      texts.push_back(std::move(text));
    }
    std::printf("---\n");
    std::fflush(stdout);
  }
  agree_on_error(error, "samples");
  return texts;
}
