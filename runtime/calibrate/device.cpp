// device: /proc/cpuinfo's "model name" and /proc/meminfo's MemTotal.
#include "runtime/calibrate/device.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace {

// The value of the first "key : value" line of `path` whose key is `key`.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t key_end = line.find_last_not_of(" \t", colon - 1);
    if (key_end == std::string::npos || line.compare(0, key_end + 1, key) != 0 ||
        key_end + 1 != key.size())
      continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

}  // namespace

fsdpgen::profile::Device cpu_device_describe(const std::string& base) {
  fsdpgen::profile::Device d;
  d.kind = "cpu";
  d.name = proc_field("/proc/cpuinfo", "model name");
  if (d.name.empty()) d.name = "unknown CPU";
  d.base = base;
  d.cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string mem_kib = proc_field("/proc/meminfo", "MemTotal");  // "131072 kB"
  d.memory_bytes = mem_kib.empty()
                       ? int64_t{sysconf(_SC_PHYS_PAGES)} * int64_t{sysconf(_SC_PAGESIZE)}
                       : std::stoll(mem_kib) * 1024;
  return d;
}

std::string device_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}
