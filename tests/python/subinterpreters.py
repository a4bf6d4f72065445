"""CUDA calls from subinterpreters (round 2's pysubinterp; tests/integration/test_sampler.cpp): 5
rounds, each creates an interpreter, runs 200 recorded copies in it 10 frames deep, and destroys
it, while the sampler reads the main thread. Exits 3 where the interpreter has no subinterpreter
module, or its subinterpreters cannot load ctypes."""
import os
import sys

try:
    import _interpreters as interpreters  # 3.13

    run = interpreters.exec
except ImportError:
    try:
        import _xxsubinterpreters as interpreters  # 3.8 to 3.12

        run = interpreters.run_string
    except ImportError:
        sys.exit(3)

CODE = """
import ctypes, os
ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)
device = ctypes.c_void_p()
assert cuda.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(64)) == 0
host = ctypes.create_string_buffer(64)
def deep(levels):
    if levels:
        return deep(levels - 1)
    for _ in range(200):
        assert cuda.cudaMemcpy(device, host, ctypes.c_size_t(64), 1) == 0  # COPY subinterpreter
deep(10)
"""


def main():
    for _ in range(5):
        interpreter = interpreters.create()
        try:
            failed = run(interpreter, CODE)  # RUN subinterpreter
        except Exception as error:  # 3.12 and older raise what the code raised
            failed = error
        interpreters.destroy(interpreter)
        if failed:
            print("failed", failed)
            sys.exit(3 if "ctypes" in str(failed) else 1)
    print("rounds 5")


main()
