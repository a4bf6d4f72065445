#pragma once
// A descriptor the shim opened, kept with the file it was opened on. A program may close
// descriptors it did not open (close_range, closefrom, dup2 onto them) and reuse the numbers for its
// own files: the shim then closes only what is still its own, never the program's.
#include <sys/stat.h>
#include <unistd.h>

namespace trainshim::shim {

struct OwnedFd {
  int fd = -1;
  dev_t device = 0;
  ino_t inode = 0;
};

// `fd` just opened by the shim (or -1).
inline OwnedFd own(int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return {fd, 0, 0};
  return {fd, st.st_dev, st.st_ino};
}

// Whether the descriptor is still open on the file the shim opened it on.
inline bool still_owned(const OwnedFd& owned) {
  struct stat st {};
  return owned.fd >= 0 && fstat(owned.fd, &st) == 0 && st.st_dev == owned.device && st.st_ino == owned.inode;
}

// Forgets the descriptor (before closing it: a child forked meanwhile never closes a number reused
// since), and closes it only if it still refers to the file the shim opened.
inline void close_owned(OwnedFd& owned) {
  const OwnedFd was = owned;
  owned = {};
  if (still_owned(was)) close(was.fd);
}

}  // namespace trainshim::shim
