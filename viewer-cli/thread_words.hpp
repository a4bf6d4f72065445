#pragma once
// A sampled thread's state and system call in words: `samples.state` is the letter of
// /proc/<pid>/task/<tid>/stat, `samples.syscall` the x86-64 number of /proc/<pid>/task/<tid>/syscall.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace trainshim::cli {

// "running", "sleeping", ...; the kernel's letters of fs/proc/array.c (task_state_array).
inline std::string_view thread_state_words(std::string_view letter) {
  if (letter.size() != 1) return "in an unknown state";
  switch (letter[0]) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in disk sleep";
    case 'T':
      return "stopped";
    case 't':
      return "stopped by a tracer";
    case 'Z':
      return "a zombie";
    case 'X':
      return "dead";
    case 'I':
      return "idle";
    case 'P':
      return "parked";
    default:
      return "in an unknown state";
  }
}

// The name of an x86-64 system call a thread blocks in (arch/x86/entry/syscalls/syscall_64.tbl),
// "syscall N" for one not listed here, empty for none (-1).
inline std::string syscall_name(int64_t number) {
  switch (number) {
    case -1:
      return "";
    case 0:
      return "read";
    case 1:
      return "write";
    case 7:
      return "poll";
    case 16:
      return "ioctl";
    case 17:
      return "pread64";
    case 18:
      return "pwrite64";
    case 19:
      return "readv";
    case 20:
      return "writev";
    case 23:
      return "select";
    case 24:
      return "sched_yield";
    case 34:
      return "pause";
    case 35:
      return "nanosleep";
    case 42:
      return "connect";
    case 43:
      return "accept";
    case 44:
      return "sendto";
    case 45:
      return "recvfrom";
    case 46:
      return "sendmsg";
    case 47:
      return "recvmsg";
    case 61:
      return "wait4";
    case 65:
      return "semop";
    case 74:
      return "fsync";
    case 75:
      return "fdatasync";
    case 128:
      return "rt_sigtimedwait";
    case 130:
      return "rt_sigsuspend";
    case 202:
      return "futex";
    case 208:
      return "io_getevents";
    case 220:
      return "semtimedop";
    case 230:
      return "clock_nanosleep";
    case 232:
      return "epoll_wait";
    case 247:
      return "waitid";
    case 270:
      return "pselect6";
    case 271:
      return "ppoll";
    case 281:
      return "epoll_pwait";
    case 288:
      return "accept4";
    case 299:
      return "recvmmsg";
    case 426:
      return "io_uring_enter";
    case 441:
      return "epoll_pwait2";
    default:
      return fmt::format("syscall {}", number);
  }
}

// "sleeping in clock_nanosleep", "running".
inline std::string thread_doing_words(std::string_view state, int64_t syscall) {
  const std::string call = syscall_name(syscall);
  return std::string(thread_state_words(state)) + (call.empty() ? "" : " in " + call);
}

}  // namespace trainshim::cli
