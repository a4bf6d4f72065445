"""The bundled example: a small data-parallel training loop on the simulated CUDA runtime.

It has the habits trainshim is built to find: the batch is copied from pageable memory (a
DataLoader with pin_memory=False), the loss is read back every step like `loss.item()`, gradients
are all-reduced, and rank 1 is slower than the others. Run it with scripts/demo.
"""
import ctypes
import os
import sys

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)  # global lookup: the calls reach the preloaded shim, as a framework's do

H2D, D2H = 1, 2
NCCL_FLOAT32, NCCL_SUM = 7, 0
STEPS = int(os.environ.get("SIM_TRAIN_STEPS", "40"))
BATCH_BYTES = 1 << 20
GRADIENT_FLOATS = 1 << 16


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed with {rc}")


def main():
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    stream = ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    batch_on_device = ctypes.c_void_p()
    gradients = ctypes.c_void_p()
    check(cuda.cudaMalloc(ctypes.byref(batch_on_device), BATCH_BYTES), "cudaMalloc")
    check(cuda.cudaMalloc(ctypes.byref(gradients), GRADIENT_FLOATS * 4), "cudaMalloc")
    unique_id = UniqueId()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    comm = ctypes.c_void_p()
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")

    batch = ctypes.create_string_buffer(BATCH_BYTES)  # pageable: pin_memory=False
    loss = ctypes.c_float()
    for _ in range(STEPS):
        check(cuda.cudaMemcpyAsync(batch_on_device, batch, ctypes.c_size_t(BATCH_BYTES), H2D, stream), "copy batch")
        check(cuda.simcudaBusy(stream, ctypes.c_uint(3000 if rank == 1 else 1500)), "forward/backward")
        check(cuda.ncclAllReduce(gradients, gradients, ctypes.c_size_t(GRADIENT_FLOATS), NCCL_FLOAT32, NCCL_SUM,
                                 comm, stream), "all-reduce")
        check(cuda.cudaMemcpyAsync(ctypes.byref(loss), gradients, ctypes.c_size_t(4), D2H, stream), "loss.item()")
        check(cuda.cudaStreamSynchronize(stream), "loss.item()")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"rank {rank}: {STEPS} steps done")


if __name__ == "__main__":
    main()
