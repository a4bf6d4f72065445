// One rank of the multi-process NCCL test; started N times by scripts/simrun. Exits non-zero
// with a message on the first wrong result. With the argument exit-while-busy it instead checks
// that a process exits promptly while its streams still have work queued.
#include <nccl.h>

#include "rank_check.h"
#include "simcuda.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using simcuda_rank::env_int;
using simcuda_rank::g_rank;

// Every rank contributes rank + 1 + (i % 7); the sum is world*(world+1)/2 + world*(i % 7).
template <class T>
void all_reduce_check(ncclComm_t comm, cudaStream_t stream, ncclDataType_t type, std::size_t count, int world) {
  std::vector<T> host(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<T>(g_rank + 1 + static_cast<int>(i % 7));
  void *send = nullptr, *recv = nullptr;
  CUDA(cudaMalloc(&send, count * sizeof(T)));
  CUDA(cudaMalloc(&recv, count * sizeof(T)));
  CUDA(cudaMemcpy(send, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  NCCL(ncclAllReduce(send, recv, count, type, ncclSum, comm, stream));
  std::vector<T> out(count);
  CUDA(cudaMemcpyAsync(out.data(), recv, count * sizeof(T), cudaMemcpyDeviceToHost, stream));  // pageable: waits
  for (std::size_t i = 0; i < count; ++i) {
    T expect = static_cast<T>(world * (world + 1) / 2 + world * static_cast<int>(i % 7));
    if (out[i] != expect) {
      std::fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", g_rank, i, static_cast<double>(out[i]),
                   static_cast<double>(expect));
      std::exit(1);
    }
  }
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "exit-while-busy") == 0) {
    // A program that exits with work still queued and without destroying its stream must
    // still exit at once and cleanly.
    cudaStream_t s;
    CUDA(cudaStreamCreate(&s));
    CUDA(simcudaBusy(s, 30000000));
    CUDA(simcudaBusy(nullptr, 30000000));
    std::printf("exiting\n");
    return 0;
  }
  g_rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  int ndev = 0;
  CUDA(cudaGetDeviceCount(&ndev));
  CUDA(cudaSetDevice(env_int("LOCAL_RANK") % ndev));

  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));  // the same id in every rank of this launch
  ncclComm_t comm = nullptr;
  NCCL(ncclCommInitRank(&comm, world, id, g_rank));
  int n = 0, r = -1;
  NCCL(ncclCommCount(comm, &n));
  NCCL(ncclCommUserRank(comm, &r));
  CHECK(n == world && r == g_rank);

  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  all_reduce_check<float>(comm, stream, ncclFloat32, 1000, world);
  all_reduce_check<std::int32_t>(comm, stream, ncclInt32, 1000, world);
  all_reduce_check<double>(comm, stream, ncclFloat64, 333, world);
  all_reduce_check<std::int64_t>(comm, stream, ncclInt64, 333, world);
  all_reduce_check<std::uint8_t>(comm, stream, ncclUint8, 100, world);
  // Larger than the shared-memory chunk, and not a multiple of it.
  all_reduce_check<float>(comm, stream, ncclFloat32, (std::size_t{4} << 20) / sizeof(float) + 12345, world);

  // Broadcast from the last rank, in place.
  {
    const std::size_t count = 300000;
    std::vector<int> host(count, g_rank == world - 1 ? 42 : -1);
    int* buf = nullptr;
    CUDA(cudaMalloc(&buf, count * sizeof(int)));
    CUDA(cudaMemcpy(buf, host.data(), count * sizeof(int), cudaMemcpyHostToDevice));
    NCCL(ncclBroadcast(buf, buf, count, ncclInt32, world - 1, comm, stream));
    CUDA(cudaMemcpyAsync(host.data(), buf, count * sizeof(int), cudaMemcpyDeviceToHost, stream));
    for (int v : host) CHECK(v == 42);
    CUDA(cudaFree(buf));
  }

  // AllGather and ReduceScatter.
  {
    const std::size_t per = 70000;
    std::vector<int> mine(per, g_rank), all(per * static_cast<std::size_t>(world));
    int *send = nullptr, *recv = nullptr;
    CUDA(cudaMalloc(&send, per * sizeof(int)));
    CUDA(cudaMalloc(&recv, all.size() * sizeof(int)));
    CUDA(cudaMemcpy(send, mine.data(), per * sizeof(int), cudaMemcpyHostToDevice));
    NCCL(ncclAllGather(send, recv, per, ncclInt32, comm, stream));
    CUDA(cudaMemcpyAsync(all.data(), recv, all.size() * sizeof(int), cudaMemcpyDeviceToHost, stream));
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == static_cast<int>(i / per));

    // Every rank sends block b = b + 1; the reduced block on rank r is world * (r + 1).
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i / per) + 1;
    CUDA(cudaMemcpy(recv, all.data(), all.size() * sizeof(int), cudaMemcpyHostToDevice));
    NCCL(ncclReduceScatter(recv, send, per, ncclInt32, ncclSum, comm, stream));
    CUDA(cudaMemcpyAsync(mine.data(), send, per * sizeof(int), cudaMemcpyDeviceToHost, stream));
    for (int v : mine) CHECK(v == world * (g_rank + 1));
    CUDA(cudaFree(send));
    CUDA(cudaFree(recv));
  }

  // Ring exchange with send/recv in one group (larger than a mailbox, both directions at once).
  {
    const std::size_t count = 200000;
    std::vector<int> out(count, g_rank), in(count, -1);
    int *sbuf = nullptr, *rbuf = nullptr;
    CUDA(cudaMalloc(&sbuf, count * sizeof(int)));
    CUDA(cudaMalloc(&rbuf, count * sizeof(int)));
    CUDA(cudaMemcpy(sbuf, out.data(), count * sizeof(int), cudaMemcpyHostToDevice));
    NCCL(ncclGroupStart());
    NCCL(ncclSend(sbuf, count, ncclInt32, (g_rank + 1) % world, comm, stream));
    NCCL(ncclRecv(rbuf, count, ncclInt32, (g_rank + world - 1) % world, comm, stream));
    NCCL(ncclGroupEnd());
    CUDA(cudaMemcpyAsync(in.data(), rbuf, count * sizeof(int), cudaMemcpyDeviceToHost, stream));
    for (int v : in) CHECK(v == (g_rank + world - 1) % world);
    CUDA(cudaFree(sbuf));
    CUDA(cudaFree(rbuf));
  }

  // The early ranks really wait: the last rank is busy before it joins the all-reduce, so the
  // all-reduce occupies the other ranks' streams until it arrives.
  {
    const unsigned busy_us = 300000;
    float* buf = nullptr;
    CUDA(cudaMalloc(&buf, 1024 * sizeof(float)));
    CUDA(cudaMemsetAsync(buf, 0, 1024 * sizeof(float), stream));              // same stream: ordered
    NCCL(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, stream));  // align the ranks
    CUDA(cudaStreamSynchronize(stream));
    cudaEvent_t start, end;
    CUDA(cudaEventCreate(&start));
    CUDA(cudaEventCreate(&end));
    if (g_rank == world - 1) CUDA(simcudaBusy(stream, busy_us));
    CUDA(cudaEventRecord(start, stream));
    NCCL(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, stream));
    CUDA(cudaEventRecord(end, stream));
    CUDA(cudaEventSynchronize(end));
    float ms = 0;
    CUDA(cudaEventElapsedTime(&ms, start, end));
    std::printf("rank %d: all-reduce took %.1f ms on the stream\n", g_rank, static_cast<double>(ms));
    if (g_rank != world - 1) CHECK(ms >= 150.0f);
    CUDA(cudaEventDestroy(start));
    CUDA(cudaEventDestroy(end));
    CUDA(cudaFree(buf));
  }

  NCCL(ncclCommDestroy(comm));
  CUDA(cudaStreamDestroy(stream));
  std::printf("rank %d/%d: ok\n", g_rank, world);
  return 0;
}
