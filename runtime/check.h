// check: the runtime's error macros. A failed MPI call reports the call, file
// and line and MPI's own message; user-facing failures (bad files, flags,
// ranks) are std::runtime_error caught by train_main, which prints them and
// exits non-zero.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>
#include <utility>

[[noreturn]] void mpi_fail(int code, const char* call, const char* file, int line);

#define MPI_CHECK(call)                                                                   \
  do {                                                                                    \
    int mpi_check_rc_ = (call);                                                           \
    if (mpi_check_rc_ != MPI_SUCCESS) mpi_fail(mpi_check_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// An error the user can act on: message says what and where.
struct runtime_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// An error every rank knows about (agreed through a collective), so that
// ranks can stop cleanly instead of aborting the job. `own` is false on
// ranks that only learned that another rank failed; `report`, on rank 0,
// is every rank's message said once (runtime/rank_errors.h), "" elsewhere.
struct agreed_error : runtime_error {
  agreed_error(const std::string& what, bool own, std::string report = "")
      : runtime_error(what), own(own), report(std::move(report)) {}
  bool own;
  std::string report;
};
