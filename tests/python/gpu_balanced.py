"""A balanced, well-fed data-parallel job: the GPU timeline must find no idle gap to blame.

Two ranks (scripts/simrun -n 2) do the same work each step: the batch's upload from pinned memory
(cudaMemcpyAsync), 7 ms of bf16 GEMM kernels, an all-reduce, and an event recorded at the step's
end. The host reads the previous step's event (cudaEventSynchronize one step behind, as a
training loop that logs the loss a step late), so the GPU always has a whole step queued.
"""
import ctypes
import os

from gpu_plant import BF16_GEMMS, Kernel, all_reduce
from sim import H2D, check, cuda, world_communicator

STEPS = int(os.environ.get("GPU_STEPS", "12"))
BATCH_BYTES = 1 << 16
GRADIENTS = 4096
FORWARD_US, BACKWARD_US = 3000, 4000


def main():
    rank, comm = world_communicator()
    forward, backward = Kernel(BF16_GEMMS[0]), Kernel(BF16_GEMMS[1])
    stream, batch, gradients, pinned = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(batch), ctypes.c_size_t(BATCH_BYTES)), "cudaMalloc")
    check(cuda.cudaMalloc(ctypes.byref(gradients), ctypes.c_size_t(4 * GRADIENTS)), "cudaMalloc")
    check(cuda.cudaHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(BATCH_BYTES), 0), "cudaHostAlloc")
    step_done = [ctypes.c_void_p(), ctypes.c_void_p()]
    for event in step_done:
        check(cuda.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")
    for step in range(STEPS):
        check(cuda.cudaMemcpyAsync(batch, pinned, ctypes.c_size_t(BATCH_BYTES), H2D, stream), "upload")
        forward.launch(stream, FORWARD_US)
        backward.launch(stream, BACKWARD_US)
        all_reduce(comm, gradients.value, GRADIENTS, stream.value)
        check(cuda.cudaEventRecord(step_done[step % 2], stream), "cudaEventRecord")
        if step > 0:
            check(cuda.cudaEventSynchronize(step_done[(step - 1) % 2]), "previous step")  # PLANTED previous_step
    check(cuda.cudaStreamSynchronize(stream), "end")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"rank {rank}: {STEPS} steps")


if __name__ == "__main__":
    main()
