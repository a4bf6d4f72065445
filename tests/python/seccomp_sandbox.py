"""A job that sandboxes itself after its first CUDA call, as an allowlist sandbox would: a seccomp
filter on all its threads (TSYNC) that kills the process (SECCOMP_RET_KILL_PROCESS) at
process_vm_readv, a call the program itself never makes (tests/integration/test_sampler.cpp).
Then a thread makes CUDA calls 20 frames deep for argv[1] seconds while the sampler reads its
frames. Prints the thread's kernel id and "finished"."""
import ctypes
import os
import platform
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402

# (process_vm_readv, seccomp, AUDIT_ARCH_*) of this machine.
CALLS = {"x86_64": (310, 317, 0xC000003E), "aarch64": (270, 277, 0xC00000B7)}[platform.machine()]


class Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]


def sandbox():
    denied, seccomp, arch = CALLS
    load_word, jump_eq, ret = 0x20, 0x15, 0x06
    kill_process, allow = 0x80000000, 0x7FFF0000
    rules = (Instruction * 6)(
        Instruction(load_word, 0, 0, 4),  # seccomp_data.arch
        Instruction(jump_eq, 1, 0, arch),
        Instruction(ret, 0, 0, kill_process),
        Instruction(load_word, 0, 0, 0),  # seccomp_data.nr
        Instruction(jump_eq, 0, 1, denied),
        Instruction(ret, 0, 0, kill_process),
    )
    rules = (Instruction * 7)(*rules, Instruction(ret, 0, 0, allow))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit("PR_SET_NO_NEW_PRIVS failed")
    program = Program(len(rules), rules)
    if libc.syscall(seccomp, 1, 1, ctypes.byref(program)) != 0:  # SET_MODE_FILTER, TSYNC
        sys.exit("seccomp failed: errno %d" % ctypes.get_errno())


def deep(levels, seconds, native):
    if levels:
        return deep(levels - 1, seconds, native)
    native.append(threading.get_native_id())
    device = ctypes.c_void_p()
    sim.check(sim.cuda.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(64)), "cudaMalloc")
    host = ctypes.create_string_buffer(64)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sim.check(sim.cuda.cudaMemcpy(device, host, ctypes.c_size_t(64), sim.H2D), "cudaMemcpy")  # SAMPLED deep
        time.sleep(0.001)


def main():
    sim.check(sim.cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    time.sleep(0.2)  # the sampler ticks before the sandbox too
    sandbox()
    native = []
    worker = threading.Thread(target=deep, args=(20, float(sys.argv[1]), native))
    worker.start()
    worker.join()
    print("worker", native[0])
    print("finished")


main()
