// Where a command's output goes: standard output, a FIFO or device where it is, or a file of its
// own renamed into place once complete.
#include "output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <streambuf>
#include <utility>

#include "errors.hpp"

namespace trainshim::cli {

namespace {

// The file an output is written to, through a descriptor of its own: close() tells whether every byte
// was written.
class OutputFile : public std::streambuf {
 public:
  // A file of its own beside `output`, renamed over it once complete: a reader never sees half a
  // file. The name is new (O_EXCL) and never a link another user planted in a shared directory
  // (O_NOFOLLOW): a <output>.partial.<random> created here, by this process.
  static std::unique_ptr<OutputFile> beside(const std::string& output, const std::string& what,
                                            const std::string& flag) {
    std::random_device random;
    std::string path;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      path = fmt::format("{}.partial.{:08x}", output, random());
      fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0)
      throw UsageError(fmt::format("{}: cannot create the {} ({}): pass a writable path with {}", output, what,
                                   std::strerror(errno), flag));
    return std::unique_ptr<OutputFile>(new OutputFile(path, fd));
  }
  // `output` itself, which exists and is no regular file (a FIFO, /dev/stdout): there is nothing
  // to rename, and a rename would replace the FIFO or the device with a file.
  static std::unique_ptr<OutputFile> in_place(const std::string& output, const std::string& flag) {
    const int fd = open(output.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      throw UsageError(fmt::format("{}: cannot open the output ({}): pass a writable path with {}", output,
                                   std::strerror(errno), flag));
    return std::unique_ptr<OutputFile>(new OutputFile(output, fd));
  }

  ~OutputFile() override { close(); }
  const std::string& path() const { return path_; }
  // False if anything could not be written.
  bool close() {
    if (fd_ < 0) return ok_;
    ok_ = flush() && ok_;
    ok_ = ::close(fd_) == 0 && ok_;
    fd_ = -1;
    return ok_;
  }

 protected:
  int overflow(int c) override {
    if (!flush()) return traits_type::eof();
    if (c != traits_type::eof()) {
      *pptr() = char(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return flush() ? 0 : -1; }

 private:
  bool flush() {
    for (const char* p = pbase(); p < pptr();) {
      const ssize_t n = write(fd_, p, std::size_t(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok_ = false;
        return false;
      }
      p += n;
    }
    setp(buffer_, buffer_ + sizeof buffer_);
    return true;
  }

  OutputFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }

  std::string path_;
  int fd_ = -1;
  bool ok_ = true;
  char buffer_[1 << 16];
};

}  // namespace

void write_output(const std::string& output, const std::string& what, const std::function<void(std::ostream&)>& write,
                  const std::string& flag) {
  if (output == "-") {
    write(std::cout);
    std::cout.flush();
    return;
  }
  struct stat existing;
  if (stat(output.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    const std::unique_ptr<OutputFile> device = OutputFile::in_place(output, flag);
    std::ostream file(device.get());
    write(file);
    file.flush();
    if (!file || !device->close())
      throw std::runtime_error(fmt::format("{}: cannot write the {}: pass another path with {}", output, what, flag));
    return;
  }
  const std::unique_ptr<OutputFile> partial = OutputFile::beside(output, what, flag);
  std::ostream file(partial.get());
  try {
    write(file);
    file.flush();
    // Not the user's mistake: the disk filled up (exit code 1).
    if (!file || !partial->close())
      throw std::runtime_error(
          fmt::format("{}: cannot write the {}: pass a path with free space with {}", partial->path(), what, flag));
    std::error_code ec;
    std::filesystem::rename(partial->path(), output, ec);
    if (ec)
      throw UsageError(fmt::format("cannot rename {} to {} ({}): pass a writable path with {}", partial->path(), output,
                                   ec.message(), flag));
  } catch (...) {
    partial->close();
    std::remove(partial->path().c_str());
    throw;
  }
}

}  // namespace trainshim::cli
