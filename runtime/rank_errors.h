// rank_errors: what the ranks of a job that failed at one agreement point
// print: each distinct message once, with the ranks that hit it ("ranks 0,
// 2-3: error: ..."), or where every rank hit the same one, that message alone
// ("error: ..."), as one process would say it. Rank 0 prints it; a job ends
// without MPI_Abort (runtime/comm.h agree_on_error, runtime/train/train.cpp).
#pragma once

#include <string>
#include <vector>

// The lines for every rank's message by rank ("" where a rank had none), in
// the order of the first rank to hit each; "" when no rank had one.
std::string rank_errors_report(const std::vector<std::string>& by_rank);

// Collective over MPI_COMM_WORLD: every rank's `error` ("" for none) gathered
// to rank 0, which gets their rank_errors_report; "" on the other ranks.
std::string rank_errors_gather(const std::string& error);
