"""The bundled example: a small data-parallel training loop on the simulated CUDA runtime.

It has the habits trainshim is built to find: the batch is copied from pageable memory (a
DataLoader with pin_memory=False), the loss is read back every step with `loss.item()`, gradients
are all-reduced, and rank 1 computes more slowly than the others. The framework is the stand-in
for PyTorch's native library (tests/programs/fake_torch.cpp, path in argv[1]): its item() is what
torch's is, a copy of the scalar to the host and a wait for the stream. Run it with scripts/demo.
"""
import ctypes
import os
import sys

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)  # global lookup: the calls reach the preloaded shim, as a framework's do
torch = ctypes.CDLL(sys.argv[1])
torch.ft_item.restype = ctypes.c_double
torch.ft_stream.restype = ctypes.c_void_p

H2D = 1
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
    check(torch.ft_init(), "framework init")
    stream = ctypes.c_void_p(torch.ft_stream())
    batch_on_device = ctypes.c_void_p()
    gradients = ctypes.c_void_p()
    check(cuda.cudaMalloc(ctypes.byref(batch_on_device), BATCH_BYTES), "cudaMalloc")
    check(cuda.cudaMalloc(ctypes.byref(gradients), GRADIENT_FLOATS * 4), "cudaMalloc")
    unique_id = UniqueId()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    comm = ctypes.c_void_p()
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")

    batch = ctypes.create_string_buffer(BATCH_BYTES)  # pageable: pin_memory=False
    for _ in range(STEPS):
        check(cuda.cudaMemcpyAsync(batch_on_device, batch, ctypes.c_size_t(BATCH_BYTES), H2D, stream), "copy batch")
        check(torch.ft_busy(ctypes.c_uint(3000 if rank == 1 else 1500)), "forward/backward")
        check(cuda.ncclAllReduce(gradients, gradients, ctypes.c_size_t(GRADIENT_FLOATS), NCCL_FLOAT32, NCCL_SUM,
                                 comm, stream), "all-reduce")
        loss = torch.ft_item()  # loss.item()
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"rank {rank}: {STEPS} steps done, last loss {loss}")


if __name__ == "__main__":
    main()
