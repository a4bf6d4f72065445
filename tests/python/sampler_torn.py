"""A main thread whose frames change all the time (a recursion, again and again) while the sampler
reads them (tests/integration/test_sampler.cpp). It recurses for at least argv[1] seconds and until
its segment's samples_torn (a uint64 at byte argv[2] of the header) counts a torn sample: on a busy
machine the sampler may be scheduled only while this thread is not. Prints "ok" when every sum
was right."""
import mmap
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402


def recurse(depth):
    if depth == 0:
        return 1
    return 1 + recurse(depth - 1)


def torn(header, offset):
    return int.from_bytes(header[offset:offset + 8], "little")


def main():
    sim.check(sim.cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    segment = "/dev/shm/trainshim-%d-%s-%d" % (os.getuid(), os.environ["TRAINSHIM_JOB"], os.getpid())
    offset = int(sys.argv[2])
    with open(segment, "rb") as f:
        header = mmap.mmap(f.fileno(), offset + 8, prot=mmap.PROT_READ)
    total, rounds = 0, 0
    start = time.monotonic()
    while time.monotonic() < start + 60:
        total += recurse(150)
        rounds += 1
        if rounds % 100 == 0 and time.monotonic() > start + float(sys.argv[1]) and torn(header, offset) > 0:
            break
    print("ok" if total == 151 * rounds else "wrong %d %d" % (total, rounds))


main()
