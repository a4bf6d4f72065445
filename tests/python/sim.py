"""The simulated CUDA runtime and NCCL through ctypes, as the test jobs here use them.

The libraries are loaded into the global scope and their functions looked up there, so that, like
a framework's own calls, they reach whichever definition comes first: the preloaded shim's.
ctypes releases the GIL around each call, as PyTorch does around CUDA work.

Kernels: `kernel(name, duration_ns)` registers a kernel under its device (mangled) name, the way a
module's registration code does, and `launch(k, stream)` launches it through cudaLaunchKernel, so
that it runs on the stream for its duration and appears by that name in CUPTI's records.
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


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


# Set once on the shared CDLL: dim3 is passed by value, and durations need 64 bits.
cuda.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                  ctypes.c_void_p]
cuda.simcudaRegisterKernel.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_void_p)]
cuda.simcudaSetKernelDuration.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]

_kernels = {}


def kernel(name, duration_ns=0):
    """The host-stub address of the kernel with this device name, registered at its first use; each
    call sets the duration its next launches run for."""
    stub = _kernels.get(name)
    if stub is None:
        stub = ctypes.c_void_p()
        check(cuda.simcudaRegisterKernel(name.encode(), duration_ns, ctypes.byref(stub)), "simcudaRegisterKernel")
        _kernels[name] = stub
    else:
        check(cuda.simcudaSetKernelDuration(stub, duration_ns), "simcudaSetKernelDuration")
    return stub


def launch(stub, stream=None, duration_ns=None, grid=(1, 1, 1), block=(1, 1, 1), shared_bytes=0):
    """cudaLaunchKernel(stub, grid, block, no arguments, shared_bytes, stream); with duration_ns, the
    kernel's duration is set first (for every later launch too)."""
    if duration_ns is not None:
        check(cuda.simcudaSetKernelDuration(stub, duration_ns), "simcudaSetKernelDuration")
    check(cuda.cudaLaunchKernel(stub, Dim3(*grid), Dim3(*block), None, shared_bytes, stream), "cudaLaunchKernel")


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


def pci_bus_id(device):
    """cudaDeviceGetPCIBusId: the device's PCI address ("0000:3b:00.0"), as the runtime gives it."""
    text = ctypes.create_string_buffer(64)
    check(cuda.cudaDeviceGetPCIBusId(text, len(text), device), "cudaDeviceGetPCIBusId")
    return text.value.decode()


def all_reduce(comm, buffer, count, stream):
    """Sums `count` floats of `buffer` (a device pointer) over the ranks, in place, on `stream`."""
    check(cuda.ncclAllReduce(buffer, buffer, ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, stream),
          "ncclAllReduce")
