// One step of every rank of a group at once, for the runners that drive their ranks from one process: rank r's
// body on a thread of its own (a pool of at least as many threads as ranks, so every rank gets one and the
// collectives meet). A rank that fails aborts the group, so the others leave their collectives; once every rank has
// returned, the first failing rank's own error is raised (a GroupAborted only when no rank has another).
#pragma once

#include <functional>

#include "runner/parallel/communicator.h"
#include "util/thread_pool.h"

namespace moeserve {

// communicator(r) is rank r's communicator (its abort() is called when rank r fails).
void run_ranks(ThreadPool& threads, int ranks, const std::function<void(int)>& body,
               const std::function<Communicator&(int)>& communicator);

}  // namespace moeserve
