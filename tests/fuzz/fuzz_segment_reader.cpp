// libFuzzer harness: the collector's reading of one producer segment, through SegmentReader's
// public API only. A segment is untrusted input: whoever can write it (a forged segment, a job
// scribbling over its own) may also change it or shrink its file while the collector reads it
// (reliability review §8), so an input says what to do after the reader has validated the header.
//
// Input: an 8-byte control block, `patch_length` bytes of patch, then the segment image.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "segment_reader.hpp"
#include "trainshim/names.hpp"

namespace {

using namespace trainshim;
using namespace trainshim::collector;

enum class AfterOpen : uint8_t { Nothing = 0, Change = 1, Truncate = 2 };

struct Control {
  uint8_t after_open;    // AfterOpen, modulo 3
  uint8_t patch_length;  // bytes of patch following this block (Change only writes them)
  uint16_t resume_at;    // the committed position a replacing reader resumes at, in every ring
  uint32_t position;     // Change: offset of the patch in the segment; Truncate: the file's new size
};
static_assert(sizeof(Control) == 8);

void write_all(int fd, const uint8_t* data, size_t size, off_t at) {
  while (size > 0) {
    const ssize_t n = pwrite(fd, data, size, at);
    if (n <= 0) abort();
    data += n;
    size -= size_t(n);
    at += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(Control)) return 0;
  Control control;
  std::memcpy(&control, data, sizeof control);
  data += sizeof control;
  size -= sizeof control;
  const size_t patch_length = control.patch_length < size ? control.patch_length : size;
  const uint8_t* patch = data;
  data += patch_length;
  size -= patch_length;

  // A segment of this user's, named as the shim names them, so the reader takes it as one.
  static const std::string name = segment_name(getuid(), "fuzz" + std::to_string(getpid()), 1);
  const std::string path = "/" + name;
  const int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) abort();
  write_all(fd, data, size, 0);

  try {
    SegmentReader reader(name);
    switch (static_cast<AfterOpen>(control.after_open % 3)) {
      case AfterOpen::Nothing:
        break;
      case AfterOpen::Change:
        // Through the file: the reader's shared mapping sees the change as a writer's store would.
        if (size > 0) write_all(fd, patch, patch_length, off_t(control.position % size));
        break;
      case AfterOpen::Truncate:
        if (ftruncate(fd, off_t(control.position % (size + 1))) != 0) abort();
        break;
    }
    // As Collector::pass reads a segment: liveness, side records, events, then the counters.
    (void)reader.header().rank;
    reader.resume({std::vector<uint64_t>(reader.geometry().ring_count, control.resume_at), control.resume_at});
    for (const bool producer_gone : {reader.producer_alive(), true}) {
      reader.drain_side([](const SideRecord&) {}, producer_gone);
      reader.drain([](const EventRecord&) {}, producer_gone);
      reader.release();
    }
    (void)(reader.dropped_ring_full() + reader.dropped_side_full() + reader.dropped_not_ready() +
           reader.gpu_records_dropped() + reader.gpu_timeline() + reader.sampler() + reader.sample_hz() +
           reader.samples_torn());
    reader.unlink();
  } catch (const std::exception&) {
    // Refused with a reason: what the collector does with a segment it cannot read.
  }
  close(fd);
  shm_unlink(path.c_str());
  return 0;
}
