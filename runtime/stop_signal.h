// stop_signal: preemption. SIGUSR1 or SIGTERM (what Slurm sends before a
// time limit or a preemption, e.g. `sbatch --signal=B:USR1@120`; mpirun
// forwards SIGUSR1) asks the run to stop after the step in progress, with a
// checkpoint. Ranks learn it from one another with the step's loss
// all-reduce (runtime/training_step.cpp), so that all stop after the same step.
#pragma once

// Makes SIGUSR1 and SIGTERM ask for a stop instead of ending the process.
void stop_signal_install();
// Whether a stop signal has arrived at this rank.
bool stop_signal_received();
