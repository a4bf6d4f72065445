// A libnccl.so.2 whose calls return at once (pnccl* global, nccl* weak, as in the real one): the
// benchmark's baseline for the cost trainshim adds to a collective.
#include <nccl.h>

extern "C" {
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  static char storage;
  *comm = reinterpret_cast<ncclComm_t>(&storage);
  return ncclSuccess;
}
ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) __attribute__((weak, alias("pncclCommInitRank")));
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
    __attribute__((weak, alias("pncclAllReduce")));
}
