#include "segment.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "environment.hpp"
#include "owned_fd.hpp"
#include "trainshim/clock.hpp"
#include "trainshim/names.hpp"

namespace trainshim::shim {

namespace {

namespace bip = boost::interprocess;

constexpr uint32_t kDefaultRings = 8;
constexpr uint32_t kDefaultRingEvents = 16384;
// The first ring is taken by the first thread to record, in a training process the one making
// almost every call: at 10 M calls/s 131,072 records (12 MiB) last 13 ms of a collector's pause
// (measured: lossless over 12 s; 65,536 lost 0.016 %), 16,384 only 1.6 ms. The other rings keep
// the smaller size, so that a segment still fits a container's /dev/shm.
constexpr uint32_t kDefaultFirstRingEvents = 131072;
constexpr uint32_t kDefaultSideRecords = 2048;

// The descriptor that holds this image's segment's liveness lock (protocol.hpp), open for the
// image's life: closing any descriptor of the file would drop the lock.
OwnedFd g_liveness;
// The segment's mapping, for the process's life: a region of the last segment created, held where
// it stays reachable (a recorder made again after fork() maps a new one and leaves the old).
bip::mapped_region* g_region = nullptr;

uint32_t round_up_power_of_two(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Reads a small /proc file with plain syscalls (no stdio in someone else's process).
std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(1 << 20));
  return text;
}

std::string read_small_file(const char* path) {
  std::string out;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buffer[1024];
  ssize_t n;
  while (out.size() < 8192 && (n = read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, size_t(n));
  close(fd);
  return out;
}

// Gives the segment its pages now. A sparse segment (ftruncate alone) takes a tmpfs page at the
// first write to it, and when /dev/shm is full that write kills the job with SIGBUS.
void reserve(bip::shared_memory_object& shm, const std::string& name, uint64_t bytes) {
  int error;
  // tmpfs gives up a large reservation when a signal arrives (EINTR): a signal is no reason to stop.
  do error = posix_fallocate(shm.get_mapping_handle().handle, 0, off_t(bytes));
  while (error == EINTR);
  if (error == 0) return;
  bip::shared_memory_object::remove(name.c_str());
  const std::string dir(kShmDir);
  if (error == ENOSPC)
    throw Refused(dir + " has no room for " + mib(bytes) + ": recording is off, the job runs unchanged; enlarge " +
                  dir +
                  " (docker --shm-size) or lower TRAINSHIM_FIRST_RING_EVENTS/TRAINSHIM_RING_EVENTS/TRAINSHIM_RINGS");
  throw Refused("cannot reserve " + mib(bytes) + " in " + dir + ": " + std::strerror(error) +
                "; recording is off, the job runs unchanged");
}

// The geometry asked for, fitted to /dev/shm's budget (segment_budget); says so when it shrank.
SegmentGeometry fitted_geometry(SegmentGeometry wanted, int local_ranks) {
  struct statvfs fs {};
  if (statvfs(std::string(kShmDir).c_str(), &fs) != 0 || fs.f_blocks == 0) return wanted;  // reserve() decides
  const ShmSpace space{uint64_t{fs.f_blocks} * fs.f_frsize, uint64_t{fs.f_bavail} * fs.f_frsize};
  const uint64_t asked = wanted.bytes();
  const std::string dir(kShmDir);
  const std::string sizes = " (" + mib(space.total) + ", " + mib(space.free) + " free)";
  if (!fit_segment(wanted, segment_budget(space, local_ranks)))
    throw Refused(dir + " is too small" + sizes + " for a segment that leaves the job's own shared memory " +
                  "its room (half of " + dir + ", up to 4 GiB): recording is off, the job runs unchanged; enlarge " +
                  dir + " (docker --shm-size)");
  if (wanted.bytes() < asked)
    say(dir + " is small" + sizes + ": this process records into " + mib(wanted.bytes()) + " instead of " + mib(asked) +
        ", so that the job's own shared memory keeps its room; records that do not fit are dropped " +
        "and counted; enlarge " + dir + " (docker --shm-size) to record in full");
  return wanted;
}

// Takes the liveness lock before the header is published, so that no collector ever sees a live
// segment unlocked. On a descriptor of its own, `shm`'s closed first: its closing would drop it.
void hold_liveness_lock(bip::shared_memory_object& shm, const std::string& name) {
  const int fd = fcntl(shm.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0);
  shm = bip::shared_memory_object();
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 1;
  if (fd < 0 || fcntl(fd, F_SETLK, &lock) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    bip::shared_memory_object::remove(name.c_str());
    throw std::runtime_error(std::string("cannot lock it to show it is in use: ") + std::strerror(error));
  }
  g_liveness = own(fd);
}

}  // namespace

uint64_t segment_budget(const ShmSpace& space, int local_ranks) {
  constexpr uint64_t kMostKeptFree = uint64_t{4} << 30;
  const uint64_t share = space.total / 4 / uint64_t(std::max(local_ranks, 1));
  const uint64_t kept_free = std::min(space.total / 2, kMostKeptFree);
  return std::min(share, space.free > kept_free ? space.free - kept_free : 0);
}

bool fit_segment(SegmentGeometry& wanted, uint64_t budget) {
  while (wanted.bytes() > budget) {
    // The part that takes the most room, of those that may still be halved.
    const uint64_t first = wanted.first_ring_events > kSmallestRingEvents ? ring_bytes(wanted.first_ring_events) : 0;
    const uint64_t others =
        wanted.ring_events > kSmallestRingEvents ? uint64_t{wanted.rings - 1} * ring_bytes(wanted.ring_events) : 0;
    const uint64_t side = wanted.side_records > kSmallestSideRecords ? side_ring_bytes(wanted.side_records) : 0;
    if (first == 0 && others == 0 && side == 0) return false;
    if (first >= others && first >= side) wanted.first_ring_events /= 2;
    else if (others >= side) wanted.ring_events /= 2;
    else wanted.side_records /= 2;
  }
  return true;
}

SegmentHeader* create_segment(const Identity& id) {
  const uint32_t rings = environment_count("TRAINSHIM_RINGS", kDefaultRings, kMaxRings);
  const uint32_t capacity =
      round_up_power_of_two(environment_count("TRAINSHIM_RING_EVENTS", kDefaultRingEvents, kMaxRingCapacity));
  // Unless asked otherwise, the first ring is never smaller than the others.
  const uint32_t first_capacity = round_up_power_of_two(
      environment_count("TRAINSHIM_FIRST_RING_EVENTS", std::max(kDefaultFirstRingEvents, capacity), kMaxRingCapacity));
  const uint32_t side_capacity =
      round_up_power_of_two(environment_count("TRAINSHIM_SIDE_RECORDS", kDefaultSideRecords, kMaxSideCapacity));
  const SegmentGeometry geometry =
      fitted_geometry({rings, first_capacity, capacity, side_capacity}, id.local_world_size);
  const uint64_t bytes = geometry.bytes();

  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  const std::string base = segment_name(getuid(), id.job, getpid());
  std::string name = base;
  bip::shared_memory_object shm;
  // A segment left by an earlier process with the same pid is not ours to reuse.
  for (int attempt = 1;; ++attempt) {
    try {
      shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, owner_only);
      break;
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() != bip::already_exists_error || attempt == 16) throw;
      name = base + "." + std::to_string(attempt);
    }
  }
  reserve(shm, name, bytes);
  auto* region = new bip::mapped_region(shm, bip::read_write, 0, bytes);
  g_region = region;
  hold_liveness_lock(shm, name);

  auto* header = static_cast<SegmentHeader*>(region->get_address());
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::string command = read_small_file("/proc/self/cmdline");
  while (!command.empty() && command.back() == '\0') command.pop_back();
  for (char& c : command)
    if (c == '\0') c = ' ';
  init_segment_header(*header, geometry.rings, geometry.first_ring_events, geometry.ring_events, geometry.side_records,
                      {.pid = getpid(),
                       .rank = id.rank,
                       .local_rank = id.local_rank,
                       .world_size = id.world_size,
                       .clock_kind = kClockKind,
                       .anchor_monotonic_ns = clock_ns(CLOCK_MONOTONIC),
                       .anchor_ticks = ticks(),
                       .anchor_realtime_ns = clock_ns(CLOCK_REALTIME),
                       .host = host,
                       .job = id.job,
                       .command = command});
  header->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  return header;
}

void release_segment_in_child() { close_owned(g_liveness); }

}  // namespace trainshim::shim
