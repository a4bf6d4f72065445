// start_race THREADS COPIES: THREADS threads make their first hooked calls at the same moment (a
// barrier), each then COPIES host-to-host cudaMemcpyAsync calls on the default stream. The main
// thread makes none: whichever thread comes first starts recording while the others arrive.
#include <cuda_runtime_api.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s THREADS COPIES\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int copies = std::atoi(argv[2]);
  std::barrier start(threads);
  std::vector<int> failures(size_t(threads), 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      char from[64] = {}, to[64];
      start.arrive_and_wait();
      for (int i = 0; i < copies; ++i)
        if (cudaMemcpyAsync(to, from, sizeof to, cudaMemcpyHostToHost, nullptr) != cudaSuccess) ++failures[size_t(t)];
    });
  for (auto& worker : workers) worker.join();
  for (int f : failures)
    if (f) return 1;
  return 0;
}
