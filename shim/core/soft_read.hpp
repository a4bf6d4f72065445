#pragma once
// Reads memory that another thread may free at any moment (its Python frames, a slot NCCL writes
// later) without risking a fault: process_vm_readv on our own process answers EFAULT for an
// unmapped address where a load would crash the program.
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>

namespace trainshim::shim {

// `self`: getpid(), taken by the caller once per batch of reads (a forked child has its own).
inline bool soft_read(pid_t self, void* to, const void* from, std::size_t bytes) {
  iovec local{to, bytes};
  iovec remote{const_cast<void*>(from), bytes};
  return process_vm_readv(self, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
}

}  // namespace trainshim::shim
