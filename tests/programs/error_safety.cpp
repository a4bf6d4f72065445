// What a hooked call returns, and the thread's last error after it, must be what they are without
// trainshim. Run with SIMCUDA_DEVICES=2, one mode per run:
//   devices  collectives on device 0, then on device 1 (its own stream, its legacy stream, and from
//            a thread whose current device is 0); no call may leave an error behind
//   pending  leaves cudaErrorInvalidDevice pending, then makes hooked calls of every kind, on
//            device 1 after device 0 has been used; the error must still be the pending one
// Exits 0 and prints "ok" when every check held.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.hpp"

namespace {

cudaError_t expected_error = cudaSuccess;

// The thread's last error after a hooked call: exactly the one the program left, if any.
void expect_last_error(int line) {
  const cudaError_t seen = cudaPeekAtLastError();
  if (seen != expected_error) {
    std::printf("line %d: last error %s, expected %s\n", line, cudaGetErrorName(seen),
                cudaGetErrorName(expected_error));
    std::exit(4);
  }
}
#define HOOKED(call)             \
  do {                           \
    CHECK(call);                 \
    expect_last_error(__LINE__); \
  } while (0)

ncclComm_t comm_on(int device) {
  CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  const bool pending = argc > 1 && std::strcmp(argv[1], "pending") == 0;
  ncclComm_t comm0 = comm_on(0);
  cudaStream_t s0;
  CHECK(cudaStreamCreate(&s0));
  void* buf0 = nullptr;
  CHECK(cudaMalloc(&buf0, 1024));
  for (int i = 0; i < 3; ++i) HOOKED(ncclAllReduce(buf0, buf0, 256, ncclFloat32, ncclSum, comm0, s0));
  HOOKED(cudaStreamSynchronize(s0));

  ncclComm_t comm1 = comm_on(1);
  cudaStream_t s1;
  CHECK(cudaStreamCreate(&s1));
  void* buf1 = nullptr;
  CHECK(cudaMalloc(&buf1, 1024));
  std::vector<char> pageable(1024, 1);
  if (pending) {
    if (cudaSetDevice(99) != cudaErrorInvalidDevice) return 1;
    expected_error = cudaErrorInvalidDevice;
  }
  for (int i = 0; i < 3; ++i) HOOKED(ncclAllReduce(buf1, buf1, 256, ncclFloat32, ncclSum, comm1, s1));
  HOOKED(ncclAllReduce(buf1, buf1, 256, ncclFloat32, ncclSum, comm1, nullptr));
  HOOKED(cudaMemcpy(buf1, pageable.data(), 1024, cudaMemcpyHostToDevice));
  HOOKED(cudaMemcpyAsync(pageable.data(), buf1, 1024, cudaMemcpyDefault, s1));
  HOOKED(cudaStreamSynchronize(s1));
  CHECK(cudaSetDevice(0));
  for (int i = 0; i < 3; ++i) HOOKED(ncclAllReduce(buf1, buf1, 256, ncclFloat32, ncclSum, comm1, s1));
  HOOKED(cudaStreamSynchronize(s1));
  HOOKED(cudaDeviceSynchronize());
  if (cudaGetLastError() != expected_error || cudaGetLastError() != cudaSuccess) return 6;
  CHECK(ncclCommDestroy(comm0));
  CHECK(ncclCommDestroy(comm1));
  std::printf("ok\n");
  return 0;
}
