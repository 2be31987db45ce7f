// device: what was measured on a CPU: this machine's processor, hardware threads and
// memory (Linux's /proc), and when.
#pragma once

#include <string>

#include "runtime/profile/profile.h"

// kind "cpu", the processor's model name, hardware threads and total memory;
// `base` is the request's.
fsdpgen::profile::Device cpu_device_describe(const std::string& base);

// Now, UTC, ISO 8601 (e.g. "2026-11-23T22:15:01Z").
std::string device_utc_now();
