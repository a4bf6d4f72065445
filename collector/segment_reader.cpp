#include "segment_reader.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "trainshim/names.hpp"

namespace trainshim::collector {

namespace {

// The mapping a thread is reading under guarded_call, and where to return to if it faults.
struct Guard {
  const char* begin;
  const char* end;
  sigjmp_buf resume;
};
thread_local Guard* t_guard = nullptr;
struct sigaction g_previous_sigbus;

// A segment shrunk under a mapping faults with SIGBUS on the pages past its new end.
void on_sigbus(int, siginfo_t* info, void*) {
  Guard* const guard = t_guard;
  const auto* at = static_cast<const char*>(info->si_addr);
  if (guard && info->si_code > 0 && at >= guard->begin && at < guard->end) siglongjmp(guard->resume, 1);
  // Not ours: let it do what it did before the collector was here. A fault repeats on return; a
  // signal that was sent is sent again.
  sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  if (info->si_code <= 0) raise(SIGBUS);
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

// Copies the header out of shared memory, the producer's published state first (the fields it
// guards were written before it), so that validation and every later use see the same values.
void copy_header(const SegmentHeader& from, SegmentHeader& to) {
  const uint32_t state = from.producer_state.load(std::memory_order_acquire);
  std::memcpy(static_cast<void*>(&to), &from, offsetof(SegmentHeader, dropped_not_ready));
  to.dropped_not_ready.store(from.dropped_not_ready.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.untimed_capturing.store(from.untimed_capturing.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.untimed_no_event.store(from.untimed_no_event.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.python_stacks.store(from.python_stacks.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.gpu_timeline.store(from.gpu_timeline.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.gpu_records_dropped.store(from.gpu_records_dropped.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.sampler.store(from.sampler.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.sample_hz.store(from.sample_hz.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.samples_torn.store(from.samples_torn.load(std::memory_order_relaxed), std::memory_order_relaxed);
  to.producer_state.store(state, std::memory_order_relaxed);
}
static_assert(offsetof(SegmentHeader, dropped_not_ready) < offsetof(SegmentHeader, untimed_capturing) &&
                  offsetof(SegmentHeader, untimed_no_event) < offsetof(SegmentHeader, producer_state) &&
                  offsetof(SegmentHeader, python_stacks) < offsetof(SegmentHeader, gpu_timeline) &&
                  offsetof(SegmentHeader, gpu_records_dropped) < offsetof(SegmentHeader, sampler) &&
                  offsetof(SegmentHeader, samples_torn) + sizeof(uint64_t) <= sizeof(SegmentHeader),
              "copy_header copies every field before dropped_not_ready as plain bytes, the atomics one by one");

}  // namespace

SegmentReader::SegmentReader(const std::string& name) : name_(name) {
  install_sigbus_handler();
  const std::string path = std::string(kShmDir) + "/" + name;
  // O_NOFOLLOW: a link planted under a segment's name is not followed (glibc adds it too, other C
  // libraries need not). O_NONBLOCK: a FIFO planted there does not block the collector.
  fd_ = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd_ < 0) {
    if (errno == ELOOP)
      throw SegmentError(SegmentError::Reason::Untrusted,
                         "not trusted: a symbolic link (not followed); another local user may be injecting records "
                         "into this job: check who created " +
                             path + ", then remove it");
    throw SegmentError(SegmentError::Reason::Unreadable, std::string("cannot open: ") + std::strerror(errno));
  }
  try {
    struct stat st {};
    if (fstat(fd_, &st) != 0)
      throw SegmentError(SegmentError::Reason::Unreadable, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0)
      throw SegmentError(
          SegmentError::Reason::Untrusted,
          fmt::format(
              "not trusted: {}owned by uid {}, mode {} (only a regular file of this user, uid {}, that no one else may "
              "read or write is read); another local user may be injecting records into this job: check who created "
              "{}, then remove it",
              S_ISREG(st.st_mode) ? "" : "not a regular file, ", st.st_uid, mode_text(st.st_mode), getuid(), path));
    if (uint64_t(st.st_size) < sizeof(SegmentHeader)) throw SegmentError(HeaderProblem::TooSmall);
    mapped_bytes_ = uint64_t(st.st_size);
    mapping_ = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (mapping_ == MAP_FAILED) {
      mapping_ = nullptr;
      throw SegmentError(SegmentError::Reason::Unreadable, std::string("cannot map: ") + std::strerror(errno));
    }
    if (!guarded([this] { copy_header(*static_cast<const SegmentHeader*>(mapping_), header_); }))
      throw SegmentError(SegmentError::Reason::Shrank, "segment shrank while being opened");
    const HeaderProblem problem = validate_header(header_, mapped_bytes_);
    if (problem != HeaderProblem::Ok) throw SegmentError(problem);
    geometry_ = geometry_of(header_);
    read_.assign(geometry_.ring_count + 1, 0);
    if (!guarded([this] {
          for (uint32_t i = 0; i < geometry_.ring_count; ++i) read_[i] = ring_of(mapping_, geometry_, i).tail();
          read_[geometry_.ring_count] = side_ring_of(mapping_, geometry_).tail();
        }))
      throw SegmentError(SegmentError::Reason::Shrank, "segment shrank while being opened");
    released_ = read_;
    // What a segment held when it was opened is read at once.
    head_seen_.assign(geometry_.ring_count, 0);
    if (!guarded([this] {
          for (uint32_t i = 0; i < geometry_.ring_count; ++i) head_seen_[i] = ring_of(mapping_, geometry_, i).head();
        }))
      throw SegmentError(SegmentError::Reason::Shrank, "segment shrank while being opened");
  } catch (...) {
    if (mapping_) munmap(mapping_, mapped_bytes_);
    close(fd_);
    throw;
  }
}

SegmentReader::~SegmentReader() {
  munmap(mapping_, mapped_bytes_);
  close(fd_);
}

bool SegmentReader::guarded_call(void (*access)(void*), void* context) const {
  if (truncated_) return false;
  Guard guard{static_cast<const char*>(mapping_), static_cast<const char*>(mapping_) + mapped_bytes_, {}};
  struct Restore {
    Guard* outer;
    ~Restore() { t_guard = outer; }
  } restore{t_guard};
  if (sigsetjmp(guard.resume, 1) != 0) {
    truncated_ = true;
    return false;
  }
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  access(context);
  return true;
}

namespace {

// Whether process `pid` maps the file of `device` and `inode` (/proc/<pid>/maps).
bool maps_file(pid_t pid, dev_t device, ino_t inode) {
  FILE* maps = std::fopen(fmt::format("/proc/{}/maps", pid).c_str(), "re");
  if (!maps) return false;
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, maps)) {
    unsigned long long start = 0, end = 0, offset = 0, mapped_inode = 0;
    unsigned major = 0, minor = 0;
    char permissions[8];
    found = std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, permissions, &offset, &major, &minor,
                        &mapped_inode) == 7 &&
            mapped_inode == inode && makedev(major, minor) == device;
  }
  std::fclose(maps);
  return found;
}

}  // namespace

bool SegmentReader::producer_alive() const {
  // An open-file-description query sees the producer's lock even from within its own process (a
  // plain F_GETLK would not), and takes nothing itself.
  struct flock query {};
  query.l_type = F_WRLCK;
  query.l_whence = SEEK_SET;
  query.l_start = 0;
  query.l_len = 1;
  // Unable to ask (kernels before 3.15): keep reading rather than retire a live segment.
  if (fcntl(fd_, F_OFD_GETLK, &query) != 0) return true;
  if (query.l_type != F_UNLCK) return true;
  // A producer can drop its lock and live on: a program that closes every descriptor it did not
  // open (close_range) closes the shim's as well. It maps its segment for as long as it lives. Seen
  // so, it is asked again at most once a second (its list of mappings can be long).
  const auto now = std::chrono::steady_clock::now();
  if (mapped_seen_ && now - *mapped_seen_ < std::chrono::seconds(1)) return true;
  struct stat st {};
  // This reader maps the segment too: a header naming the collector's own pid proves nothing.
  if (header_.pid > 0 && pid_t(header_.pid) != getpid() && fstat(fd_, &st) == 0 &&
      maps_file(pid_t(header_.pid), st.st_dev, st.st_ino)) {
    mapped_seen_ = now;
    return true;
  }
  return false;
}

namespace {

// Hands out the records from `cursor` up to `end`, at most one lap past `released` (the ring holds
// no more; a forged slot state cannot make the reader run on).
template <class Ring, class Sink, class Valid>
void drain_ring(const Ring& ring, uint64_t& cursor, uint64_t end, uint64_t released, const Sink& sink,
                const Valid& valid, bool producer_gone, DrainCounts& counts) {
  for (; cursor < end && cursor - released < ring.capacity(); ++cursor) {
    typename Ring::Record record;
    if (ring.complete(cursor)) {
      record = ring.slots()[cursor & (ring.capacity() - 1)].record;
      if (valid(record)) {
        sink(record);
        ++counts.records;
      } else {
        ++counts.malformed;
      }
    } else if (producer_gone) {
      ++counts.unpublished;
    } else {
      break;  // claimed, not yet complete: never waited for here
    }
  }
}

// How far `committed` can move the cursor: within what the ring holds (between the tail this reader
// found and the head), and, while the producer lives, not past a record it has not finished.
template <class Ring>
uint64_t resumed_cursor(const Ring& ring, uint64_t cursor, uint64_t released, uint64_t capacity, uint64_t committed,
                        bool producer_gone) {
  const uint64_t head = ring.head();
  const uint64_t limit = head < released ? released : std::min(head, released + capacity);
  const uint64_t end = std::clamp(committed, released, limit);
  for (typename Ring::Record record; cursor < end; ++cursor)
    if (!producer_gone && ring.read(cursor, record) != Ring::PopStatus::Record) break;
  return cursor;
}

}  // namespace

DrainCounts SegmentReader::drain(const std::function<void(const EventRecord&)>& sink, bool producer_gone) {
  DrainCounts counts;
  guarded([&] {
    for (uint32_t i = 0; i < geometry_.ring_count; ++i) {
      const RingView ring = ring_of(mapping_, geometry_, i);
      // The last kReaderLag slots before a moving head are left alone: their cache lines may still
      // be the producer's, and reading them would make its next stores wait for the lines to come
      // back. Once the head stands still from one pass to the next (or the producer is gone) they
      // are read too, so a record reaches the collector at the latest one pass after its thread
      // went quiet: the hang watch relies on that.
      // A ring of fewer than kLagRingSlots cannot spare the room: it is read to its head.
      const uint64_t head = ring.head();
      uint64_t end = head;
      if (!producer_gone && head != head_seen_[i] && ring.capacity() >= kLagRingSlots)
        end = head - read_[i] > kReaderLag ? head - kReaderLag : read_[i];
      head_seen_[i] = head;
      drain_ring(ring, read_[i], end, released_[i], sink, validate_record, producer_gone, counts);
    }
  });
  return counts;
}

DrainCounts SegmentReader::drain_side(const std::function<void(const SideRecord&)>& sink, bool producer_gone) {
  DrainCounts counts;
  const uint32_t side = geometry_.ring_count;
  guarded([&] {
    const SideRingView ring = side_ring_of(mapping_, geometry_);
    drain_ring(ring, read_[side], ring.head(), released_[side], sink, validate_side_record, producer_gone, counts);
  });
  return counts;
}

void SegmentReader::release() {
  const uint32_t side = geometry_.ring_count;
  guarded([&] {
    for (uint32_t i = 0; i < geometry_.ring_count; ++i) {
      ring_of(mapping_, geometry_, i).release(read_[i]);
      released_[i] = read_[i];
    }
    side_ring_of(mapping_, geometry_).release(read_[side]);
    released_[side] = read_[side];
  });
}

SegmentReader::Positions SegmentReader::positions() const {
  return {std::vector<uint64_t>(read_.begin(), read_.end() - 1), read_.back()};
}

void SegmentReader::resume(const Positions& committed) {
  const bool gone = !producer_alive();
  const uint32_t side = geometry_.ring_count;
  guarded([&] {
    for (uint32_t i = 0; i < geometry_.ring_count && i < committed.rings.size(); ++i)
      read_[i] = resumed_cursor(ring_of(mapping_, geometry_, i), read_[i], released_[i], geometry_.capacity_of(i),
                                committed.rings[i], gone);
    read_[side] = resumed_cursor(side_ring_of(mapping_, geometry_), read_[side], released_[side],
                                 geometry_.side_capacity, committed.side, gone);
  });
  release();
}

uint64_t SegmentReader::dropped_side_full() const {
  uint64_t dropped = 0;
  guarded([&] { dropped = side_ring_of(mapping_, geometry_).dropped(); });
  return dropped;
}

uint64_t SegmentReader::dropped_ring_full() const {
  uint64_t total = 0;
  if (!guarded([&] {
        for (uint32_t i = 0; i < geometry_.ring_count; ++i) total += ring_of(mapping_, geometry_, i).dropped();
      }))
    return 0;
  return total;
}

template <class Value>
Value SegmentReader::read_live(Value (*read)(const SegmentHeader&)) const {
  Value value{};
  guarded([&] { value = read(*static_cast<const SegmentHeader*>(mapping_)); });
  return value;
}

uint64_t SegmentReader::dropped_not_ready() const {
  return read_live<uint64_t>(
      [](const SegmentHeader& h) { return h.dropped_not_ready.load(std::memory_order_relaxed); });
}
uint64_t SegmentReader::untimed_capturing() const {
  return read_live<uint64_t>(
      [](const SegmentHeader& h) { return h.untimed_capturing.load(std::memory_order_relaxed); });
}
uint64_t SegmentReader::untimed_no_event() const {
  return read_live<uint64_t>([](const SegmentHeader& h) { return h.untimed_no_event.load(std::memory_order_relaxed); });
}
uint32_t SegmentReader::python_stacks() const {
  return read_live<uint32_t>([](const SegmentHeader& h) { return h.python_stacks.load(std::memory_order_relaxed); });
}
uint32_t SegmentReader::gpu_timeline() const {
  return read_live<uint32_t>([](const SegmentHeader& h) { return h.gpu_timeline.load(std::memory_order_relaxed); });
}
uint64_t SegmentReader::gpu_records_dropped() const {
  return read_live<uint64_t>(
      [](const SegmentHeader& h) { return h.gpu_records_dropped.load(std::memory_order_relaxed); });
}

uint32_t SegmentReader::sampler() const {
  return read_live<uint32_t>([](const SegmentHeader& h) { return h.sampler.load(std::memory_order_relaxed); });
}
uint32_t SegmentReader::sample_hz() const {
  return read_live<uint32_t>([](const SegmentHeader& h) { return h.sample_hz.load(std::memory_order_relaxed); });
}
uint64_t SegmentReader::samples_torn() const {
  return read_live<uint64_t>([](const SegmentHeader& h) { return h.samples_torn.load(std::memory_order_relaxed); });
}

void SegmentReader::unlink() { shm_unlink(name_.c_str()); }

std::vector<std::string> list_segments(uid_t uid, const std::string& job) {
  std::vector<std::string> names;
  const std::string prefix = segment_prefix(uid, job);
  DIR* dir = opendir(std::string(kShmDir).c_str());
  if (!dir) return names;
  while (dirent* entry = readdir(dir)) {
    std::string_view name(entry->d_name);
    if (name.starts_with(prefix)) names.emplace_back(name);
  }
  closedir(dir);
  return names;
}

}  // namespace trainshim::collector
