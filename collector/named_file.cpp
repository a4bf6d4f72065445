#include "named_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace trainshim::collector {

int open_regular_file(const std::string& path) {
  // Looked at before the open too: opening some devices has effects of its own.
  struct stat before {};
  if (stat(path.c_str(), &before) != 0 || !S_ISREG(before.st_mode)) return -1;
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return -1;
  struct stat opened {};
  if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::string> read_regular_file(const std::string& path, std::size_t max_bytes) {
  const int fd = open_regular_file(path);
  if (fd < 0) return std::nullopt;
  std::string text;
  struct stat st {};
  if (fstat(fd, &st) == 0 && std::size_t(st.st_size) <= max_bytes) {
    // A file that grows while it is read stops one byte over the limit: too large.
    char chunk[65536];
    while (text.size() <= max_bytes) {
      const ssize_t n = read(fd, chunk, std::min(sizeof chunk, max_bytes + 1 - text.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(chunk, std::size_t(n));
    }
  }
  close(fd);
  if (text.size() > max_bytes || std::size_t(st.st_size) > max_bytes) return std::nullopt;
  return text;
}

}  // namespace trainshim::collector
