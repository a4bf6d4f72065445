#pragma once
// A stored sample's state and system call in words, as the collector's hang stacks say them
// (trainshim/syscall_names.hpp): `samples.state` is one letter (empty when unknown), `samples.syscall`
// an x86-64 number (-1: none).
#include <cstdint>
#include <string>
#include <string_view>

#include "trainshim/syscall_names.hpp"

namespace trainshim::cli {

// "running", "sleeping", ...; "" when not known.
inline std::string_view stored_state_words(std::string_view state) {
  return state.size() == 1 ? thread_state_words(state[0]) : std::string_view();
}

// "sleeping in clock_nanosleep", "running", "in an unknown state".
inline std::string thread_doing_words(std::string_view state, int64_t syscall) {
  const std::string_view words = stored_state_words(state);
  const std::string call = syscall_words(syscall);
  return (words.empty() ? std::string("in an unknown state") : std::string(words)) +
         (call.empty() ? "" : " in " + call);
}

}  // namespace trainshim::cli
