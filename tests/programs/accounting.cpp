// A job with known numbers: every rank makes exactly these calls, so the report must show
// exactly these counts and bytes (EndToEnd.CppJobAcrossFourRanksIsCountedExactly in
// tests/integration/test_end_to_end.cpp asserts them, each with where it comes from here).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.hpp"

int main() {
  const char* world_env = std::getenv("WORLD_SIZE");
  const char* rank_env = std::getenv("RANK");
  const int world = world_env ? std::atoi(world_env) : 1;
  const int rank = rank_env ? std::atoi(rank_env) : 0;

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  void* device = nullptr;
  CHECK(cudaMalloc(&device, 1 << 20));
  void* device2 = nullptr;
  CHECK(cudaMalloc(&device2, 1 << 20));
  std::vector<char> pageable(1 << 20, 1);
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 1 << 16));

  for (int i = 0; i < 10; ++i) CHECK(cudaMemcpy(device, pageable.data(), 4096, cudaMemcpyHostToDevice));
  for (int i = 0; i < 5; ++i) CHECK(cudaMemcpyAsync(device, pinned, 8192, cudaMemcpyHostToDevice, stream));
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpyAsync(pageable.data(), device, 1000, cudaMemcpyDeviceToHost, stream));
  for (int i = 0; i < 2; ++i) CHECK(cudaMemcpy2D(device2, 64, device, 64, 16, 4, cudaMemcpyDeviceToDevice));
  for (int i = 0; i < 4; ++i) CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaDeviceSynchronize());

  if (world > 1) {
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id));
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, world, id, rank));
    for (int i = 0; i < 6; ++i) CHECK(ncclAllReduce(device, device2, 256, ncclFloat32, ncclSum, comm, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(ncclCommDestroy(comm));
  }
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(device));
  CHECK(cudaFree(device2));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
