"""A rank of a job with known numbers, calling the CUDA runtime through ctypes.

ctypes releases the GIL around each foreign call, as PyTorch does around CUDA work. The runtime is
loaded into the global scope and its functions looked up there, so that, like a framework's own
calls, they reach whichever definition comes first: the preloaded shim's.
"""
import ctypes
import os
import sys

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)

H2D, D2H = 1, 2
NCCL_INT32, NCCL_SUM = 2, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: {rc}")


def main():
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    stream = ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    device = ctypes.c_void_p()
    check(cuda.cudaMalloc(ctypes.byref(device), 1 << 16), "cudaMalloc")
    pinned = ctypes.c_void_p()
    check(cuda.cudaMallocHost(ctypes.byref(pinned), 1 << 12), "cudaMallocHost")
    pageable = ctypes.create_string_buffer(4096)

    for _ in range(8):
        check(cuda.cudaMemcpy(device, pageable, ctypes.c_size_t(1000), H2D), "cudaMemcpy")
    for _ in range(4):
        check(cuda.cudaMemcpyAsync(device, pinned, ctypes.c_size_t(2048), H2D, stream), "cudaMemcpyAsync")
    for _ in range(2):
        check(cuda.cudaMemcpyAsync(pageable, device, ctypes.c_size_t(512), D2H, stream), "cudaMemcpyAsync")
    for _ in range(3):
        check(cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    for _ in range(2):
        check(cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    unique_id = UniqueId()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    comm = ctypes.c_void_p()
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")
    for _ in range(3):
        check(cuda.ncclAllReduce(device, device, ctypes.c_size_t(64), NCCL_INT32, NCCL_SUM, comm, stream),
              "ncclAllReduce")
    check(cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    check(cuda.cudaFreeHost(pinned), "cudaFreeHost")
    check(cuda.cudaFree(device), "cudaFree")


if __name__ == "__main__":
    main()
