#include "runner/parallel/run_ranks.h"

#include <exception>
#include <vector>

#include "runner/parallel/group_aborted.h"
#include "util/error.h"

namespace moeserve {

void run_ranks(ThreadPool& threads, int ranks, const std::function<void(int)>& body,
               const std::function<Communicator&(int)>& communicator) {
  MOESERVE_CHECK(threads.size() >= static_cast<size_t>(ranks), "{} threads for {} ranks", threads.size(), ranks);
  std::vector<std::exception_ptr> own(ranks), aborted(ranks);
  threads.parallel_for(ranks, 1, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const int rank = static_cast<int>(r);
      try {
        body(rank);
      } catch (const GroupAborted&) {
        aborted[rank] = std::current_exception();
      } catch (const std::exception& e) {
        own[rank] = std::current_exception();
        communicator(rank).abort(fmt::format("rank {} of {} failed: {}", rank, ranks, e.what()));
      }
    }
  });
  for (const auto& error : own)
    if (error) std::rethrow_exception(error);
  for (const auto& error : aborted)
    if (error) std::rethrow_exception(error);
}

}  // namespace moeserve
