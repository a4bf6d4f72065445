"""A rank of a job with known numbers, calling the CUDA runtime through ctypes (see sim.py)."""
import ctypes

from sim import D2H, H2D, NCCL_INT32, NCCL_SUM, check, cuda, world_communicator


def main():
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

    _, comm = world_communicator()
    for _ in range(3):
        check(cuda.ncclAllReduce(device, device, ctypes.c_size_t(64), NCCL_INT32, NCCL_SUM, comm, stream),
              "ncclAllReduce")
    check(cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    check(cuda.cudaFreeHost(pinned), "cudaFreeHost")
    check(cuda.cudaFree(device), "cudaFree")


if __name__ == "__main__":
    main()
