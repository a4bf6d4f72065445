#pragma once
// Reads memory that another thread may free at any moment (its Python frames, a slot NCCL writes
// later) without risking a fault: the process's memory read as a file (/proc/<pid>/mem), which
// answers EIO for an unmapped address where a load would crash the program. pread is allowed by any
// seccomp allowlist a program installs for itself; process_vm_readv, a call the program never makes,
// may be denied there with SECCOMP_RET_KILL_PROCESS, so it is used only where the file cannot be
// opened (no /proc).
#include <sys/types.h>

#include <cstddef>

namespace trainshim::shim {

class SoftMemory {
 public:
  // `process`: 0 for this process (its memory file is kept open for the image's life, opened again
  // where it is no longer this process's: in a forked child, or after the program closed it), or
  // a forked child of it (its file opened here, closed by the destructor).
  explicit SoftMemory(pid_t process = 0);
  ~SoftMemory();
  SoftMemory(const SoftMemory&) = delete;
  SoftMemory& operator=(const SoftMemory&) = delete;

  bool read(void* to, const void* from, std::size_t bytes);
  pid_t process() const { return pid_; }

 private:
  pid_t pid_;
  int fd_ = -1;
  bool owned_ = false;  // fd_ is this object's to close
};

// One read through a SoftMemory of this process.
inline bool soft_read(void* to, const void* from, std::size_t bytes) { return SoftMemory().read(to, from, bytes); }

}  // namespace trainshim::shim
