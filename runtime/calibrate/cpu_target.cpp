// cpu_target: the CPU runtime's functions, as layers.h, elementwise.h,
// muon_ns.h, op_overhead.h, collectives.h and copies.h time them.
#include <omp.h>

#include <cblas.h>

#include <algorithm>
#include <thread>

#include "runtime/calibrate/collectives.h"
#include "runtime/calibrate/copies.h"
#include "runtime/calibrate/device.h"
#include "runtime/calibrate/elementwise.h"
#include "runtime/calibrate/layers.h"
#include "runtime/calibrate/muon_ns.h"
#include "runtime/calibrate/op_overhead.h"
#include "runtime/calibrate/target.h"

namespace {

namespace profile = fsdpgen::profile;

class cpu final : public calibrate_target {
 public:
  profile::Device describe(const std::string& base) const override {
    return cpu_device_describe(base);
  }
  std::string layer_problem(const profile::LayerTime& l) const override {
    return ::layer_problem(l);
  }
  int64_t enter_compute(int64_t ranks_per_node, bool measuring) override {
    const int64_t threads = threads_per_rank(ranks_per_node);
    if (measuring) {
      omp_set_num_threads(static_cast<int>(threads));
      openblas_set_num_threads(static_cast<int>(threads));
    }
    return threads;
  }
  measurement op_overhead(const measure_options& o) override { return measure_op_overhead(o); }
  measurement layer(const profile::LayerTime& l, const measure_options& o) override {
    return measure_layer(l, o);
  }
  measurement elementwise(const profile::ElementwiseTime& e, const measure_options& o) override {
    return measure_elementwise(e, o);
  }
  measurement muon_ns(const profile::MuonNsTime& m, const measure_options& o) override {
    return measure_muon_ns(m, o);
  }
  measurement collective(const profile::CollectiveTime& c, MPI_Comm group,
                         const measure_options& o) override {
    return measure_collective(c, group, o);
  }
  measurement copy(const profile::CopyTime& c, const measure_options& o) override {
    return measure_copy(c, o);
  }
};

}  // namespace

int64_t threads_per_rank(int64_t ranks_per_node) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / ranks_per_node);
}

std::unique_ptr<calibrate_target> cpu_target() {
  return std::make_unique<cpu>();
}
