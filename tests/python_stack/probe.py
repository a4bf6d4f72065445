"""Reads this interpreter's stack through the python_stack_probe library and compares it, frame by
frame (file, function, line), with traceback.extract_stack() taken on the same source line.

ctypes releases the GIL around each foreign call, so the library reads the stack exactly as a hooked
CUDA call would: without the GIL. Usage: probe.py <path to libpython_stack_probe.so>
"""
import ctypes
import sys
import threading
import traceback

LIB = ctypes.CDLL(sys.argv[1])
LIB.probe_stack.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
LIB.probe_stack_soft.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
LIB.probe_status.restype = ctypes.c_uint
LIB.probe_version.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIB.probe_capture_ns.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
LIB.probe_capture_ns.restype = ctypes.c_double
LIB.probe_thread.argtypes = [ctypes.c_uint64, ctypes.c_int]
LIB.probe_layout.argtypes = [ctypes.c_char_p, ctypes.c_int]

MAX_FRAMES = 256
OUTER_FRAMES = 20  # python_stack.hpp kOuterFrames
MAX_WALK = 4096  # python_stack.cpp kMaxWalk
BUFFER = 1 << 20
failures = []
checked = []


def decode(text):
    # Filenames with undecodable bytes come back as those bytes (surrogateescape, os.fsencode).
    return text.decode("utf-8", "surrogateescape")


def kept(frames, max_frames):
    """The frames capture() keeps of a chain, innermost first: all of them, or when deeper than
    max_frames the innermost and the outermost OUTER_FRAMES (max_frames // 3 for a small max);
    only the innermost of a chain longer than the walk (MAX_WALK)."""
    if len(frames) <= max_frames:
        return frames
    outer = OUTER_FRAMES if max_frames >= 3 * OUTER_FRAMES else max_frames // 3
    if len(frames) > MAX_WALK:
        return frames[: max_frames - outer]
    return frames[: max_frames - outer] + (frames[len(frames) - outer :] if outer else [])


def probe(label, max_frames=MAX_FRAMES):
    buf = ctypes.create_string_buffer(BUFFER)
    soft = ctypes.create_string_buffer(BUFFER)
    # All on one line: the probe frame's line is the line of this statement for all of them.
    expected, count, soft_count = traceback.extract_stack(), LIB.probe_stack(buf, BUFFER, max_frames), LIB.probe_stack_soft(soft, BUFFER, max_frames)
    want = kept([(f.filename, f.name, f.lineno) for f in reversed(expected)], max_frames)
    for reading, text, returned in (("", buf, count), (" (soft reads)", soft, soft_count)):
        got = []
        for line in decode(text.value).splitlines():
            file, function, lineno = line.split("\t")
            got.append((file, function, int(lineno)))
        checked.append(label + reading)
        if returned != len(got) or got != want:
            failures.append(label + reading)
            print("MISMATCH in %s%s (probe returned %d)" % (label, reading, returned))
            print("  traceback:")
            for frame in want:
                print("    %s:%s:%d" % frame)
            print("  probe:")
            for frame in got:
                print("    %s:%s:%d" % frame)


def level3(label):
    probe(label)


def level2(label):
    return level3(
        label,
    )


def level1(label):
    level2(label)


def generator(label):
    yield probe(label)


async def coroutine(label):
    probe(label)


class Holder:
    def method(self, label):
        probe(label)

    @staticmethod
    def nested(label):
        def inner():
            probe(label)

        inner()


def recurse(depth, label, max_frames):
    if depth == 0:
        probe(label, max_frames)
    else:
        recurse(depth - 1, label, max_frames)


# Names of every string kind: ASCII, Latin-1 (kind 1), BMP (kind 2), astral (kind 4), and a
# filename carrying an undecodable byte as a lone surrogate.
NAMED_SOURCE = """
def größe(label):
    probe(label)

def 測試(label):
    größe(label)

def 𠀀(label):
    測試(label)
"""


def run_named(filename, label):
    scope = {"probe": probe}
    exec(compile(NAMED_SOURCE, filename, "exec"), scope)
    scope["𠀀"](label)


def scenarios(prefix):
    sys.setrecursionlimit(5000)
    level1(prefix + "nested")
    next(generator(prefix + "generator"))
    try:
        coroutine(prefix + "coroutine").send(None)
    except StopIteration:
        pass
    Holder().method(prefix + "method")
    Holder.nested(prefix + "closure")
    list(map(lambda _: level1(prefix + "called back from C"), [0]))
    sorted([2, 1], key=lambda x: x if x == 2 else level3(prefix + "sort key") or 0)
    recurse(300, prefix + "deep, capped at 64: innermost 44 and outermost 20", 64)
    recurse(300, prefix + "deep, capped at 62: innermost 42 and outermost 20", 62)
    recurse(5, prefix + "capped at 2: the innermost", 2)
    recurse(5, prefix + "capped at 6: innermost 4 and outermost 2", 6)
    recurse(4200, prefix + "deeper than the walk: the innermost only", 62)
    names = ("/tmp/plain_ascii.py", "/tmp/ünïcödé.py", "/tmp/файл.py", "/tmp/😀.py", "/tmp/b\udcffd.py")
    for name in names:
        run_named(name, prefix + "names in " + ascii(name))


def unsupported():
    # Any other version must be left alone: no frames, no version.
    version = ctypes.create_string_buffer(16)
    LIB.probe_version(version, 16)
    buf = ctypes.create_string_buffer(BUFFER)
    count = LIB.probe_stack(buf, BUFFER, MAX_FRAMES)
    status = LIB.probe_status()
    print("CPython %s (unsupported): version %r, %d frames, status %#x"
          % (sys.version.split()[0], version.value, count, status))
    # python_stacks_word(PythonStacks::UnsupportedVersion, minor)
    return 0 if count == 0 and version.value == b"" and status == (4 | sys.version_info[1] << 8) else 1


def freed_outermost_frame():
    """3.10 links freed frames through f_back into its free list, which ends in NULL: a walk that
    crossed a return must not end there as if it had reached the thread's outermost frame. A sleeping
    thread's outermost frame is marked FRAME_RETURNED (1), as a freed frame is, for one read."""
    if sys.version_info[:2] != (3, 10):
        return
    layout = ctypes.create_string_buffer(1 << 16)
    LIB.probe_layout(layout, len(layout))
    state = dict(line.split("=") for line in layout.value.decode().split() if "=" in line).get("frame.state")
    wake = threading.Event()
    sleeper = threading.Thread(target=wake.wait)
    sleeper.start()
    try:
        outermost = sys._current_frames()[sleeper.ident]
        while outermost.f_back:
            outermost = outermost.f_back
        running = LIB.probe_thread(sleeper.ident, MAX_FRAMES)
        byte = ctypes.c_byte.from_address(id(outermost) + int(state))
        byte.value = 1
        freed = LIB.probe_thread(sleeper.ident, MAX_FRAMES)
        byte.value = 0
    finally:
        wake.set()
        sleeper.join()
    checked.append("freed outermost frame")
    if running <= 0 or freed != -1:
        print("a chain ending in a freed frame: %d frames while running, %d freed (-1: torn)" % (running, freed))
        failures.append("freed outermost frame")


def main():
    if not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return unsupported()
    # python_stacks_word(PythonStacks::Available, minor)
    if LIB.probe_status() != (1 | sys.version_info[1] << 8):
        print("stacks_status() is %#x" % LIB.probe_status())
        return 1
    version = ctypes.create_string_buffer(16)
    LIB.probe_version(version, 16)
    running = "%d.%d" % sys.version_info[:2]
    if version.value.decode() != running:
        print("interpreter_version() is %r, running %s" % (version.value.decode(), running))
        return 1

    scenarios("main thread: ")
    worker = threading.Thread(target=scenarios, args=("worker thread: ",))
    worker.start()
    worker.join()

    freed_outermost_frame()
    foreign = LIB.probe_foreign_thread()
    if foreign != 0:
        print("a thread without a Python thread state saw %d frames" % foreign)
        failures.append("foreign thread")

    found = ctypes.c_int()
    ns = measure(found)
    print("CPython %s: %d stacks matched traceback, %d mismatched; capture of %d frames: %.0f ns"
          % (sys.version.split()[0], len(checked) - len(failures), len(failures), found.value, ns))
    return 1 if failures else 0


def measure(found, depth=22):
    # ~25 frames: the depth plus measure, main and the module.
    if depth:
        return measure(found, depth - 1)
    return LIB.probe_capture_ns(100000, 64, ctypes.byref(found))


if __name__ == "__main__":
    sys.exit(main())
