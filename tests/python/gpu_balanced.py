"""A balanced, well-fed data-parallel job: the GPU timeline must find no idle gap to blame.

Two ranks (scripts/simrun -n 2) do the same work each step: the batch's upload from pinned memory
(cudaMemcpyAsync), 7 ms of bf16 GEMM kernels, an all-reduce, and an event recorded at the step's
end. The host waits for the event of two steps before (cudaEventSynchronize, as a training loop
that logs its loss late), so the GPU always has a whole step queued, even when the machine is
so loaded that the host stalls for a few milliseconds. Where the machine stalls it for longer
than the GPU has queued (two steps: 14 ms of kernels), the GPU does go idle: the job measures its
host time from one step's last enqueued call to the next one's ("period"), which bounds any gap.
"""
import ctypes
import os

from gpu_plant import BF16_GEMMS, Intervals, Kernel, all_reduce
from sim import H2D, check, cuda, world_communicator

STEPS = int(os.environ.get("GPU_STEPS", "12"))
LAG = 2  # steps between an event's record and the host's wait for it
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
    step_done = [ctypes.c_void_p() for _ in range(LAG + 1)]
    for event in step_done:
        check(cuda.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")
    measured = Intervals("GPU_PLANT_OUT")
    measured.start("period")
    for step in range(STEPS):
        check(cuda.cudaMemcpyAsync(batch, pinned, ctypes.c_size_t(BATCH_BYTES), H2D, stream), "upload")
        forward.launch(stream, FORWARD_US)
        backward.launch(stream, BACKWARD_US)
        all_reduce(comm, gradients.value, GRADIENTS, stream.value)
        check(cuda.cudaEventRecord(step_done[step % (LAG + 1)], stream), "cudaEventRecord")
        measured.stop("period")
        measured.start("period")
        if step >= LAG:
            earlier = step_done[(step - LAG) % (LAG + 1)]
            check(cuda.cudaEventSynchronize(earlier), "earlier step")  # PLANTED earlier_step
    check(cuda.cudaStreamSynchronize(stream), "end")
    measured.write(rank)
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"rank {rank}: {STEPS} steps")


if __name__ == "__main__":
    main()
