// elementwise: the optimizer's update, the gradient norm's sum of squares
// and the fp32-master-to-params conversion, timed through the runtime's own
// functions (runtime/optimizer.h, runtime/cpu/step.h).
#pragma once

#include "runtime/calibrate/measure.h"
#include "runtime/profile/profile.h"

measurement measure_elementwise(const fsdpgen::profile::ElementwiseTime& e,
                                const measure_options& o);
