// Makes hooked device-to-device copies at a steady rate, for scripts/bench/ingest: run under
// LD_PRELOAD=libtrainshim.so on the stub runtime, with the collector the shim starts. The copies
// go out in batches at clock deadlines, so the rate is steady over the run however the collector
// is scheduled; a producer thread held off its core does not burst to catch up (kLongestCatchUpNs).
// Prints what it made; the script compares that with what the database stored.
// Usage: ingest_producer RATE_PER_S SECONDS [THREADS]
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

bool pin(pid_t tid, int cpu) {
  if (cpu >= sysconf(_SC_NPROCESSORS_ONLN)) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof set, &set) == 0;
}

// The collector the first hooked call started inherited this process's affinity; move every
// thread of it to its own core, so that it drains on one core as on a real node.
int pin_collector(const std::string& job, int cpu) {
  const std::string wanted = std::string("--job") + '\0' + job + '\0';
  const uint64_t give_up = now_ns() + 3'000'000'000;
  while (now_ns() < give_up) {
    DIR* proc = opendir("/proc");
    for (dirent* entry; proc && (entry = readdir(proc));) {
      const int pid = std::atoi(entry->d_name);
      if (pid <= 0) continue;
      std::ifstream in("/proc/" + std::string(entry->d_name) + "/cmdline");
      const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmdline.find("trainshim-collector") == std::string::npos || cmdline.find(wanted) == std::string::npos)
        continue;
      // Its first process only forks and exits: keep looking until the one that stays is found.
      {
        std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
        std::string fields((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const auto close_paren = fields.rfind(')');
        const int parent = close_paren == std::string::npos ? 0 : std::atoi(fields.c_str() + close_paren + 4);
        if (parent == getpid()) continue;
      }
      DIR* tasks = opendir(("/proc/" + std::string(entry->d_name) + "/task").c_str());
      int pinned = 0;
      for (dirent* task; tasks && (task = readdir(tasks));)
        if (const int tid = std::atoi(task->d_name); tid > 0 && pin(tid, cpu)) ++pinned;
      if (tasks) closedir(tasks);
      closedir(proc);
      return pinned ? pid : 0;
    }
    if (proc) closedir(proc);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

char g_source[64];
char g_destination[64];

// A thread held off its core for longer than this goes on at its rate from where it is instead of
// making up for the lost time in one burst: a job held off is slower, it does not burst, and a burst
// of 16,384 calls fills a ring within a millisecond whatever the collector does.
constexpr uint64_t kLongestCatchUpNs = 1'000'000;

// One producer thread: `calls` copies at `rate` per second, `batch` at a time, or fewer if it was
// held off and `end_ns` came first. Adds to `held_off_ns` the time it gave up catching up on.
uint64_t produce(double rate, uint64_t calls, uint64_t batch, uint64_t start_ns, uint64_t end_ns,
                 uint64_t& held_off_ns) {
  const auto stream = reinterpret_cast<cudaStream_t>(0x1000);
  uint64_t made = 0;
  uint64_t origin_ns = start_ns, made_at_origin = 0;
  while (made < calls && now_ns() < end_ns) {
    uint64_t due = origin_ns + uint64_t(double(made - made_at_origin) * 1e9 / rate);
    if (const uint64_t now = now_ns(); now > due + kLongestCatchUpNs) {
      held_off_ns += now - due;
      origin_ns = due = now;
      made_at_origin = made;
    }
    while (now_ns() < due) {
    }
    const uint64_t n = std::min(batch, calls - made);
    for (uint64_t i = 0; i < n; ++i)
      cudaMemcpyAsync(g_destination, g_source, sizeof g_source, cudaMemcpyDeviceToDevice, stream);
    made += n;
  }
  return made;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s RATE_PER_S SECONDS [THREADS]\n", argv[0]);
    return 2;
  }
  const double rate = std::atof(argv[1]);
  const double seconds = std::atof(argv[2]);
  const int threads = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
  const char* job = std::getenv("TRAINSHIM_JOB");

  // The first hooked call creates the segment and starts the collector.
  cudaMemcpyAsync(g_destination, g_source, sizeof g_source, cudaMemcpyDeviceToDevice, nullptr);
  const int collector = job ? pin_collector(job, 1) : 0;

  const double per_thread_rate = rate / threads;
  const uint64_t per_thread_calls = uint64_t(per_thread_rate * seconds);
  // A batch every 100 µs or so: the steady rate the collector sees, never one burst that
  // overruns a ring while the rate is low.
  const uint64_t batch = std::max<uint64_t>(1, uint64_t(per_thread_rate / 10'000));
  std::vector<uint64_t> made(threads), held_off_ns(threads);
  // Steady state: the collector has had time to open its database and make its first passes.
  const uint64_t start = now_ns() + 500'000'000;
  const auto producer = [&](int t) {
    // Producers on cpu 0, 2, 3, ...: cpu 1 is the collector's.
    pin(0, t == 0 ? 0 : t + 1);
    made[t] = produce(per_thread_rate, per_thread_calls, batch, start, start + uint64_t(seconds * 1e9), held_off_ns[t]);
  };
  // The first producer is the thread that made the first call, as in a training process whose
  // main thread makes almost every call: it writes the first (larger) ring.
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(producer, t);
  producer(0);
  for (auto& w : workers) w.join();
  const uint64_t elapsed = now_ns() - start;
  uint64_t total = 1;  // the first call
  for (uint64_t m : made) total += m;
  uint64_t held_off = 0;
  for (uint64_t h : held_off_ns) held_off += h;
  std::printf("made=%llu seconds=%.3f achieved_per_s=%.0f held_off_ms=%.0f collector_pinned=%d\n",
              (unsigned long long)total, double(elapsed) / 1e9, double(total - 1) / (double(elapsed) / 1e9),
              double(held_off) / 1e6, collector ? 1 : 0);
  return 0;
}
