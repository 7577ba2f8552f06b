// What a rank's collective raises when another rank of its group failed (Communicator::abort): the failing rank's
// own error is the one to report, this one only says why the others stopped.
#pragma once

#include <string>

#include "util/error.h"

namespace moeserve {

class GroupAborted : public Error {
 public:
  explicit GroupAborted(const std::string& why) : Error("parallel group aborted: " + why) {}
};

}  // namespace moeserve
