// Scenario S8 of the PyTorch fidelity note, in C++: collectives leave GPU timing events pending for
// trainshim's poller while this thread captures a CUDA graph in global mode (the default of
// torch.cuda.graph and make_graphed_callables), copying with cudaMemcpyDefault inside the capture.
// Every capture must end as it does without the shim. Prints "captures=N" when all succeeded.
//   capture_collectives_prog N [pinned-only]   (pinned-only: no cudaMemcpyDefault in the capture)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "simcuda.h"

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  const bool default_copies = !(argc > 2 && std::strcmp(argv[2], "pinned-only") == 0);
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  cudaStream_t collectives, side;
  CHECK(cudaStreamCreateWithFlags(&collectives, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  void *a = nullptr, *b = nullptr, *grads = nullptr, *pinned = nullptr;
  CHECK(cudaMalloc(&a, 4096));
  CHECK(cudaMalloc(&b, 4096));
  CHECK(cudaMalloc(&grads, 1024));
  CHECK(cudaMallocHost(&pinned, 4096));
  for (int i = 0; i < iterations; ++i) {
    // The all-reduce queues behind 3 ms of work: its events stay pending through the capture.
    CHECK(simcudaBusy(collectives, 3000));
    CHECK(ncclAllReduce(grads, grads, 256, ncclFloat32, ncclSum, comm, collectives));
    CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 10; ++k) {
      if (default_copies) CHECK(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDefault, side));
      CHECK(cudaMemcpyAsync(a, pinned, 4096, cudaMemcpyHostToDevice, side));
    }
    // The host time a long capture takes (thousands of kernel launches in a real one).
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(side, &graph);
    if (ended != cudaSuccess) {
      std::printf("capture %d failed: %s\n", i, cudaGetErrorName(ended));
      return 3;
    }
    cudaGraphExec_t exec = nullptr;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, side));
    CHECK(cudaStreamSynchronize(side));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  CHECK(cudaStreamSynchronize(collectives));
  CHECK(ncclCommDestroy(comm));
  std::printf("captures=%d\n", iterations);
  return 0;
}
