// copies: host <-> device copies of offload. On the CPU runtime both memory
// spaces are host memory and a copy is a memcpy between two host buffers (the
// emitter's copy_h2d_op; codegen/emit/CommOps.cpp).
#pragma once

#include "runtime/calibrate/measure.h"
#include "runtime/profile/profile.h"

measurement measure_copy(const fsdpgen::profile::CopyTime& c, const measure_options& o);
