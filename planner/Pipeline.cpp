// Pipeline: the flat list of passes.
#include "planner/Pipeline.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "planner/Fit.h"

namespace fsdpgen {
namespace {

class PassTimer {
 public:
  PassTimer(bool on, const char* name)
      : on_(on), name_(name), start_(std::chrono::steady_clock::now()) {}
  ~PassTimer() {
    if (!on_) return;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                    .count();
    std::fputs(fmt::format("pass {:<10} {:8.2f} ms\n", name_, ms).c_str(), stderr);
  }

 private:
  bool on_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

Pipeline run_pipeline(const std::string& spec_path, const PipelineOptions& options) {
  Pipeline p;
  const bool t = options.time_passes;
  {
    PassTimer timer(t, "frontend");
    FrontendResult r = load_spec_file(spec_path, options.overrides);
    p.diagnostics = std::move(r.diagnostics);
    p.spec = std::move(r.spec);
  }
  if (!p.spec || options.frontend_only) return p;
  {
    PassTimer timer(t, "lower");
    p.units = lower(*p.spec);
  }
  {
    PassTimer timer(t, "schedule");
    p.schedule =
        build_schedule(*p.units, options.target ? schedule_options_for(*options.target, *p.spec)
                                                : options.schedule);
  }
  {
    PassTimer timer(t, "memory");
    p.memory = plan_memory(*p.schedule);
  }
  return p;
}

}  // namespace fsdpgen
