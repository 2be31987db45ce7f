// training_samples: every sample_every steps, rank 0 prints a few
// generations from the document start (as llm.c prints its samples) and
// adds them to the step's --metrics line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/step_context.h"
#include "runtime/train/run_shape.h"

struct training_sampler;  // rank 0's generator and buffers (training_samples.cpp)

struct training_samples {
  // Collective: how often; on rank 0 the generator, its buffers and its
  // decoder (made at set-up before the arena, so that they are not in it).
  void open(const run_shape& s);
  // What the banner says of them ("" without samples on this rank).
  std::string banner() const;
  // After `steps_done` steps, every `every` steps.
  bool due(int64_t steps_done) const;
  // Collective: every rank's weights to rank 0, which prints a few
  // generations (seeded by `seed` and the step) and returns them (empty
  // elsewhere).
  std::vector<std::string> sample(const run_shape& s, step_context& c, backend& b, int64_t seed,
                                  int64_t steps_done);

  int64_t every = 0;                          // 0: none
  std::shared_ptr<training_sampler> sampler;  // rank 0's (null elsewhere)
};
