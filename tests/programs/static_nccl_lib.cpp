// Stands in for libtorch_cuda.so of a PyTorch build with bundled dependencies
// (.ci/manywheel/build_cuda.sh: USE_STATIC_NCCL=1): NCCL is linked into the library itself, its
// ncclX (and, built with PROFAPI, pncclX) exported from it, and Python loads it into a local scope.
// Built from simcuda's NCCL sources.
#include <cuda_runtime_api.h>
#include <nccl.h>

extern "C" __attribute__((visibility("default"))) int all_reduce_from_local_scope(int times) {
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return 1;
  cudaStream_t stream;
  void* grads = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaMalloc(&grads, 1024) != cudaSuccess) return 1;
  for (int i = 0; i < times; ++i)
    if (ncclAllReduce(grads, grads, 256, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 1;
  if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}
