// One rank of an NCCL job in one of the ways PyTorch drives NCCL; started N times by
// scripts/simrun. Exits non-zero with a message on the first unexpected result.
//   nonblocking    world communicator created non-blocking (ncclInProgress, polled ready as
//                  PyTorch's NCCLComm::waitReady does), 30 all-reduces, a non-blocking split by
//                  parity (child handle written only once ready), 30 all-reduces on the child
//   scalable       ncclCommInitRankScalable over two root ids, 10 all-reduces
//   shrink         5 all-reduces on the world; ranks 1 and 3 leave, the others shrink the world
//                  (passing the excluded ranks in different orders) and run 10 all-reduces
//   groups         3 steps, each: rank N-1 busy on its stream, then a ring send/recv group and
//                  an all-to-all as a group of sends and receives (torch all_to_all_single),
//                  then a group of two all-reduces (coalescing)
//   p2p_straggler  30 steps; rank 2 is late on the host by 30 ms; every third step ranks 0 and
//                  1 exchange with send/recv in a group (batch_isend_irecv) on the same
//                  communicator before the step's all-reduce
//   simulate       a group planned with ncclGroupSimulateEnd and launched nowhere, then 5
//                  all-reduces
//   captured       5 all-reduces, 3 captured into a CUDA graph (replayed once), 5 more
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rank_check.h"
#include "simcuda.h"

namespace {

using simcuda_rank::env_int;
using simcuda_rank::g_rank;
int g_world = 1;

// PyTorch's NCCLComm::waitReady / C10D_NCCL_CHECK_TIMEOUT: poll until the operation finished.
void wait_ready(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    NCCL(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  CHECK(state == ncclSuccess);
}

// A call on a non-blocking communicator returns ncclSuccess or ncclInProgress.
void nonblocking_call(ncclResult_t rc, ncclComm_t comm) {
  CHECK(rc == ncclSuccess || rc == ncclInProgress);
  wait_ready(comm);
}

ncclComm_t world(bool blocking) {
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, g_world, id, g_rank, &config);
  if (blocking) {
    CHECK(rc == ncclSuccess);
  } else {
    CHECK(rc == ncclInProgress);  // init.cc: a non-blocking init returns before it is done
    CHECK(comm != nullptr);
    wait_ready(comm);
  }
  return comm;
}

void all_reduce(float* buf, ncclComm_t comm, cudaStream_t stream, bool blocking = true) {
  const ncclResult_t rc = ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, stream);
  if (blocking) CHECK(rc == ncclSuccess);
  else nonblocking_call(rc, comm);
}

void nonblocking(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(false);
  for (int i = 0; i < 30; ++i) all_reduce(buf, comm, stream, false);
  ncclComm_t half = nullptr;
  // No config: the child inherits the parent's non-blocking mode.
  CHECK(ncclCommSplit(comm, g_rank % 2, g_rank, &half, nullptr) == ncclInProgress);
  wait_ready(comm);
  CHECK(half != nullptr);  // written once the split completed (NCCL >= 2.23)
  int n = 0, me = -1;
  NCCL(ncclCommCount(half, &n));
  NCCL(ncclCommUserRank(half, &me));
  CHECK(n == g_world / 2 && me == g_rank / 2);
  for (int i = 0; i < 30; ++i) all_reduce(buf, half, stream, false);
  CUDA(cudaStreamSynchronize(stream));
  NCCL(ncclCommDestroy(half));
  NCCL(ncclCommDestroy(comm));
}

void scalable(float* buf, cudaStream_t stream) {
  ncclUniqueId ids[2];
  NCCL(ncclGetUniqueId(&ids[0]));
  NCCL(ncclGetUniqueId(&ids[1]));
  ncclComm_t comm = nullptr;
  NCCL(ncclCommInitRankScalable(&comm, g_world, g_rank, 2, ids, nullptr));
  for (int i = 0; i < 10; ++i) all_reduce(buf, comm, stream);
  CUDA(cudaStreamSynchronize(stream));
  NCCL(ncclCommDestroy(comm));
}

void shrink(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(true);
  for (int i = 0; i < 5; ++i) all_reduce(buf, comm, stream);
  CUDA(cudaStreamSynchronize(stream));
  if (g_rank % 2 == 1) return;  // the leaving ranks do not take part (nccl.h: ncclCommShrink)
  int excluded[2] = {3, 1};
  if (g_rank == 2) std::swap(excluded[0], excluded[1]);
  ncclComm_t rest = nullptr;
  NCCL(ncclCommShrink(comm, excluded, 2, &rest, nullptr, NCCL_SHRINK_DEFAULT));
  int n = 0, me = -1;
  NCCL(ncclCommCount(rest, &n));
  NCCL(ncclCommUserRank(rest, &me));
  CHECK(n == 2 && me == g_rank / 2);
  for (int i = 0; i < 10; ++i) all_reduce(buf, rest, stream);
  CUDA(cudaStreamSynchronize(stream));
  NCCL(ncclCommDestroy(rest));
  NCCL(ncclCommDestroy(comm));
}

void groups(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(true);
  const std::size_t count = 4096;
  float *send = nullptr, *recv = nullptr;
  CUDA(cudaMalloc(&send, count * sizeof(float) * std::size_t(g_world)));
  CUDA(cudaMalloc(&recv, count * sizeof(float) * std::size_t(g_world)));
  for (int step = 0; step < 3; ++step) {
    all_reduce(buf, comm, stream);  // aligns the ranks
    CUDA(cudaStreamSynchronize(stream));
    if (g_rank == g_world - 1) CUDA(simcudaBusy(stream, 300000));  // PLANTED late rank: 300 ms
    NCCL(ncclGroupStart());
    NCCL(ncclSend(send, count, ncclFloat32, (g_rank + 1) % g_world, comm, stream));
    NCCL(ncclRecv(recv, count, ncclFloat32, (g_rank + g_world - 1) % g_world, comm, stream));
    NCCL(ncclGroupEnd());
    NCCL(ncclGroupStart());  // torch all2all_single_equal_split
    for (int r = 0; r < g_world; ++r) {
      NCCL(ncclSend(send + std::size_t(r) * count, count, ncclFloat32, r, comm, stream));
      NCCL(ncclRecv(recv + std::size_t(r) * count, count, ncclFloat32, r, comm, stream));
    }
    NCCL(ncclGroupEnd());
    CUDA(cudaStreamSynchronize(stream));
    if (g_rank == g_world - 1) CUDA(simcudaBusy(stream, 300000));
    NCCL(ncclGroupStart());  // coalescing: one operation
    all_reduce(buf, comm, stream);
    all_reduce(buf + 256, comm, stream);
    NCCL(ncclGroupEnd());
    CUDA(cudaStreamSynchronize(stream));
  }
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  NCCL(ncclCommDestroy(comm));
}

void p2p_straggler(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(true);
  float *out = nullptr, *in = nullptr;
  CUDA(cudaMalloc(&out, 1024 * sizeof(float)));
  CUDA(cudaMalloc(&in, 1024 * sizeof(float)));
  for (int step = 0; step < 30; ++step) {
    if (g_rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // PLANTED straggler
    if (step % 3 == 0 && g_rank < 2) {
      const int peer = 1 - g_rank;
      NCCL(ncclGroupStart());
      NCCL(ncclSend(out, 1024, ncclFloat32, peer, comm, stream));
      NCCL(ncclRecv(in, 1024, ncclFloat32, peer, comm, stream));
      NCCL(ncclGroupEnd());
    }
    all_reduce(buf, comm, stream);
    CUDA(cudaStreamSynchronize(stream));
  }
  CUDA(cudaFree(out));
  CUDA(cudaFree(in));
  NCCL(ncclCommDestroy(comm));
}

void simulate(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(true);
  NCCL(ncclGroupStart());
  all_reduce(buf, comm, stream);
  NCCL(ncclSend(buf, 64, ncclFloat32, (g_rank + 1) % g_world, comm, stream));
  NCCL(ncclRecv(buf + 64, 64, ncclFloat32, (g_rank + g_world - 1) % g_world, comm, stream));
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  NCCL(ncclGroupSimulateEnd(&info));
  CHECK(info.estimatedTime >= 0);
  for (int i = 0; i < 5; ++i) all_reduce(buf, comm, stream);
  CUDA(cudaStreamSynchronize(stream));
  NCCL(ncclCommDestroy(comm));
}

void captured(float* buf, cudaStream_t stream) {
  ncclComm_t comm = world(true);
  for (int i = 0; i < 5; ++i) all_reduce(buf, comm, stream);
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 3; ++i) all_reduce(buf, comm, stream);
  cudaGraph_t graph = nullptr;
  CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CUDA(cudaGraphLaunch(exec, stream));  // one replay: the simulated kernels run once
  CUDA(cudaStreamSynchronize(stream));
  for (int i = 0; i < 5; ++i) all_reduce(buf, comm, stream);
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaGraphExecDestroy(exec));
  CUDA(cudaGraphDestroy(graph));
  NCCL(ncclCommDestroy(comm));
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  g_rank = env_int("RANK");
  g_world = env_int("WORLD_SIZE");
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* buf = nullptr;
  CUDA(cudaMalloc(&buf, 1024 * sizeof(float)));
  const std::string mode = argv[1];
  if (mode == "nonblocking") nonblocking(buf, stream);
  else if (mode == "scalable") scalable(buf, stream);
  else if (mode == "shrink") shrink(buf, stream);
  else if (mode == "groups") groups(buf, stream);
  else if (mode == "p2p_straggler") p2p_straggler(buf, stream);
  else if (mode == "simulate") simulate(buf, stream);
  else if (mode == "captured") captured(buf, stream);
  else CHECK(!"unknown mode");
  CUDA(cudaFree(buf));
  CUDA(cudaStreamDestroy(stream));
  std::printf("rank %d/%d: %s ok\n", g_rank, g_world, mode.c_str());
  return 0;
}
