#include "soft_read.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "owned_fd.hpp"

namespace trainshim::shim {

namespace {

// This process's memory file: the descriptor, the file it was opened on and the process that opened
// it. Replaced, never changed: a reader holds the one it loaded. One left behind by a replacement is
// not freed (a reader may still use it); there is one per fork or per close by the program.
struct OwnMemory {
  OwnedFd file;
  pid_t pid;
};

std::atomic<const OwnMemory*> g_own_memory{nullptr};

// The held memory file, if it is this process's and may be used: one that could not be opened is
// kept as such; an open one, when `verify`, only while it is still the file opened.
bool usable(const OwnMemory* held, pid_t self, bool verify) {
  return held && held->pid == self && (held->file.fd < 0 || !verify || still_owned(held->file));
}

// Opens this process's memory file; -1 where it cannot be read (no /proc, or a sandbox's /proc
// that lacks it): a known byte is read back.
int open_own_memory() {
  const int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  static const char known = 1;
  char copy = 0;
  if (pread(fd, &copy, 1, off_t(reinterpret_cast<uintptr_t>(&known))) == 1 && copy == known) return fd;
  close(fd);
  return -1;
}

// This process's memory file, opened again when the one held is not this process's (a forked
// child's inherited one reads its parent's memory) or, with `verify`, no longer open on it (the
// program closed it, and may have reused the number); -1 where it cannot be read, which is kept
// too, so that each reader does not try again.
int own_memory_fd(pid_t self, bool verify) {
  const OwnMemory* held = g_own_memory.load(std::memory_order_acquire);
  if (usable(held, self, verify)) return held->file.fd;
  const int fd = open_own_memory();
  const auto* opened = new OwnMemory{own(fd), self};
  if (g_own_memory.compare_exchange_strong(held, opened, std::memory_order_acq_rel)) {
    // A parent's, inherited by this child: closed here (only while it is still the file opened).
    if (held && held->pid != self) {
      OwnedFd inherited = held->file;
      close_owned(inherited);
    }
    return fd;
  }
  // Another thread opened one meanwhile: that one is used.
  OwnedFd mine = opened->file;
  close_owned(mine);
  delete opened;
  return usable(held, self, true) ? held->file.fd : -1;
}

}  // namespace

SoftMemory::SoftMemory(pid_t process) : pid_(process ? process : getpid()) {
  if (process == 0) {
    fd_ = own_memory_fd(pid_, false);
    return;
  }
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/mem", int(process));
  fd_ = open(path, O_RDONLY | O_CLOEXEC);
  owned_ = fd_ >= 0;
}

SoftMemory::~SoftMemory() {
  if (owned_) close(fd_);
}

bool SoftMemory::read(void* to, const void* from, std::size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(from);
  if (fd_ >= 0) {
    if (address > uintptr_t(INT64_MAX) - bytes) return false;
    if (pread(fd_, to, bytes, off_t(address)) == static_cast<ssize_t>(bytes)) return true;
    // Unmapped, or the descriptor is no longer the memory file: only then is it checked.
    if (owned_) return false;
    const int checked = own_memory_fd(pid_, true);
    if (checked == fd_ || checked < 0) return false;
    fd_ = checked;
    return pread(fd_, to, bytes, off_t(address)) == static_cast<ssize_t>(bytes);
  }
  iovec local{to, bytes};
  iovec remote{const_cast<void*>(from), bytes};
  return process_vm_readv(pid_, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
}

}  // namespace trainshim::shim
