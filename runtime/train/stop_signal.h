// stop_signal: preemption and Ctrl-C. SIGUSR1 or SIGTERM (what Slurm sends
// before a time limit or a preemption, e.g. `sbatch --signal=B:USR1@120`;
// mpirun forwards SIGUSR1) or SIGINT (Ctrl-C) asks the run to stop after the
// step in progress, with a checkpoint; a second SIGINT ends the process at
// once. Ranks learn it from one another with the step's loss all-reduce
// (runtime/train/training_step.cpp), so that all stop after the same step.
#pragma once

// Makes SIGUSR1, SIGTERM and the first SIGINT ask for a stop instead of
// ending the process.
void stop_signal_install();
// Whether a stop signal has arrived at this rank.
bool stop_signal_received();
// What the first stop signal to arrive at this rank was, for the stop
// message: "SIGUSR1", "SIGTERM" or "SIGINT (Ctrl-C)"; "" before any.
const char* stop_signal_name();
