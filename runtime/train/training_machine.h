// training_machine: what a run's steps execute on: the backend (its arena
// and executor), the step context it reads, and the optimizer's tables the
// context points into (weight-decay ranges, this rank's Muon part).
#pragma once

#include <memory>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"
#include "runtime/step_context.h"

struct training_machine {
  arena mem;
  step_context c;
  optimizer_decay_table decay;
  muon_layout muon;  // optimizer = muon(...): this rank's part (empty otherwise)
  // Declared after what it points into, so that it is destroyed (stopping
  // its threads or freeing the device after a failure) before them.
  std::unique_ptr<backend> b;
};
