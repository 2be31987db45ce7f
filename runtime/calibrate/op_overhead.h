// op_overhead: what handing one op of the schedule to a stream costs on the
// CPU runtime: waking a worker thread that waits as runtime/cpu/streams.cpp's do.
#pragma once

#include "runtime/calibrate/measure.h"

// The one-way hand-off between two threads (half a ping-pong's round trip),
// median over runs of kHandoffsPerRun round trips each.
measurement measure_op_overhead(const measure_options& o);
