#pragma once
// A sampled thread's state and system call in words: `samples.state` is the letter of
// /proc/<pid>/task/<tid>/stat, `samples.syscall` the x86-64 number of /proc/<pid>/task/<tid>/syscall.
// The same names and words as the collector's hang messages.
#include <cstdint>
#include <string>
#include <string_view>

namespace trainshim::cli {

// A system call by its x86-64 number (arch/x86/entry/syscalls/syscall_64.tbl), among the ones a
// thread is found blocked in; "" for any other.
inline constexpr std::string_view syscall_name(int64_t number) {
  struct Entry {
    int64_t number;
    std::string_view name;
  };
  constexpr Entry kNames[] = {
      {0, "read"},
      {1, "write"},
      {2, "open"},
      {3, "close"},
      {7, "poll"},
      {16, "ioctl"},
      {17, "pread64"},
      {18, "pwrite64"},
      {19, "readv"},
      {20, "writev"},
      {23, "select"},
      {24, "sched_yield"},
      {34, "pause"},
      {35, "nanosleep"},
      {40, "sendfile"},
      {42, "connect"},
      {43, "accept"},
      {44, "sendto"},
      {45, "recvfrom"},
      {46, "sendmsg"},
      {47, "recvmsg"},
      {61, "wait4"},
      {65, "semop"},
      {70, "msgrcv"},
      {73, "flock"},
      {74, "fsync"},
      {75, "fdatasync"},
      {128, "rt_sigtimedwait"},
      {130, "rt_sigsuspend"},
      {202, "futex"},
      {208, "io_getevents"},
      {220, "semtimedop"},
      {230, "clock_nanosleep"},
      {232, "epoll_wait"},
      {247, "waitid"},
      {257, "openat"},
      {270, "pselect6"},
      {271, "ppoll"},
      {281, "epoll_pwait"},
      {288, "accept4"},
      {299, "recvmmsg"},
      {426, "io_uring_enter"},
      {441, "epoll_pwait2"},
      {449, "futex_waitv"},
  };
  for (const Entry& e : kNames)
    if (e.number == number) return e.name;
  return {};
}

// Its name, "syscall N" for one not named above, "" for none (-1: running, or not known).
inline std::string syscall_words(int64_t number) {
  if (number < 0) return {};
  const std::string_view name = syscall_name(number);
  return name.empty() ? "syscall " + std::to_string(number) : std::string(name);
}

// The kernel's state letters (fs/proc/array.c, task_state_array) in words; "" for none or another.
inline constexpr std::string_view thread_state_words(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "disk wait";
    case 'T':
      return "stopped";
    case 't':
      return "tracing stop";
    case 'Z':
      return "zombie";
    case 'X':
      return "dead";
    case 'I':
      return "idle";
    default:
      return {};
  }
}

// A stored state (`samples.state`: one letter, empty when unknown) in words; "" when not known.
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
