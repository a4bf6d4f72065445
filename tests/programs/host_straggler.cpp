// A straggler whose late time is pure host work, without Python: two ranks (scripts/simrun -n 2),
// rank 1 sleeps 40 ms each step in usleep before the all-reduce the other rank waits in. The
// sampler can name no function here, only the thread's state and its system call (glibc's usleep
// is nanosleep, which since glibc 2.31 is the clock_nanosleep system call).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdlib>

#include "check.hpp"
#include "simcuda.h"

namespace {

constexpr int kSteps = 20;
constexpr int kSlowRank = 1;
constexpr useconds_t kSleepUs = 40'000;

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : 0;
}

}  // namespace

int main() {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  cudaStream_t stream;
  float* grads = nullptr;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&grads), 4096));
  ncclUniqueId id;
  ncclComm_t comm;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, world, id, rank));
  for (int step = 0; step < kSteps; ++step) {
    CHECK(simcudaBusy(stream, 2000));
    if (rank == kSlowRank) usleep(kSleepUs);
    CHECK(ncclAllReduce(grads, grads, 1024, ncclFloat32, ncclSum, comm, stream));
    CHECK(cudaStreamSynchronize(stream));
  }
  CHECK(ncclCommDestroy(comm));
  return 0;
}
