// Drives the rank backends of one tensor-parallel group as one Backend, for callers that
// have no RankExecutors (teacher forcing, `strata generate --force-ids`, tests): step()
// runs ranks 1..n-1 on threads of their own and rank 0 on the caller, concurrently (their
// collectives meet), and returns rank 0's result; the first error of any rank is rethrown
// after every rank has returned. The engine does not use this: its RankExecutors are the
// rank threads.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace strata {

// `ranks`: rank 0 first. One rank is returned as is.
std::unique_ptr<Backend> make_tp_group(std::vector<std::unique_ptr<Backend>> ranks);

}  // namespace strata
