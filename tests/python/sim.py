"""The simulated CUDA runtime and NCCL through ctypes, as the test jobs here use them.

The libraries are loaded into the global scope and their functions looked up there, so that, like
a framework's own calls, they reach whichever definition comes first: the preloaded shim's.
ctypes releases the GIL around each call, as PyTorch does around CUDA work.
"""
import ctypes
import os
import sys

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)

H2D, D2H = 1, 2
NCCL_INT32, NCCL_FLOAT32, NCCL_SUM = 2, 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: {rc}")


def world_communicator():
    """This rank's communicator over the whole job (rank and size from the launcher)."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    unique_id, comm = UniqueId(), ctypes.c_void_p()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")
    return rank, comm
