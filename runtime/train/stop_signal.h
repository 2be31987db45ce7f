// stop_signal: preemption and Ctrl-C. SIGUSR1 or SIGTERM (what Slurm sends
// before a time limit or a preemption, e.g. `sbatch --signal=B:USR1@120`;
// mpirun forwards SIGUSR1) or SIGINT (Ctrl-C) asks the run to stop after the
// step in progress, with a checkpoint; a second SIGINT ends the process at
// once. Ranks learn it from one another with the step's loss all-reduce
// (runtime/train/training_step.cpp), so that all stop after the same step.
#pragma once

#include <string>

// Makes SIGUSR1, SIGTERM and the first SIGINT ask for a stop instead of
// ending the process.
void stop_signal_install();

// The stop signals the ranks count, in this order: SIGUSR1, SIGTERM, SIGINT.
constexpr int kStopSignals = 3;
// This rank's count of each stop signal: 1 for the first to arrive, 0 for
// the others (all 0 before any), to be summed over the ranks.
void stop_signal_count(double mine[kStopSignals]);
// What the ranks' summed counts say, for the stop message: "" when no rank
// received a stop signal, else each signal that came, e.g. "SIGUSR1", and
// how many of the `world` ranks had received it when some had not yet (a
// signal sent to every rank reaches them at slightly different times):
// "SIGUSR1 (1 of 2 ranks had received it)".
std::string stop_signal_agreed(const double all[kStopSignals], int world);
