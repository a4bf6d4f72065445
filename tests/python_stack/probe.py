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
LIB.probe_version.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIB.probe_capture_ns.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
LIB.probe_capture_ns.restype = ctypes.c_double

MAX_FRAMES = 256
BUFFER = 1 << 20
failures = []
checked = []


def decode(text):
    # Filenames with undecodable bytes come back as those bytes (surrogateescape, os.fsencode).
    return text.decode("utf-8", "surrogateescape")


def probe(label, max_frames=MAX_FRAMES):
    buf = ctypes.create_string_buffer(BUFFER)
    # Both on one line: the probe frame's line is the line of this statement for both of them.
    expected, count = traceback.extract_stack(), LIB.probe_stack(buf, BUFFER, max_frames)
    want = [(f.filename, f.name, f.lineno) for f in reversed(expected)][:max_frames]
    got = []
    for line in decode(buf.value).splitlines():
        file, function, lineno = line.split("\t")
        got.append((file, function, int(lineno)))
    checked.append(label)
    if count != len(got) or got != want:
        failures.append(label)
        print("MISMATCH in %s (probe returned %d)" % (label, count))
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
    recurse(300, prefix + "deep, capped at 64", 64)
    recurse(5, prefix + "capped at 2", 2)
    names = ("/tmp/plain_ascii.py", "/tmp/ünïcödé.py", "/tmp/файл.py", "/tmp/😀.py", "/tmp/b\udcffd.py")
    for name in names:
        run_named(name, prefix + "names in " + ascii(name))


def unsupported():
    # Any other version must be left alone: no frames, no version.
    version = ctypes.create_string_buffer(16)
    LIB.probe_version(version, 16)
    buf = ctypes.create_string_buffer(BUFFER)
    count = LIB.probe_stack(buf, BUFFER, MAX_FRAMES)
    print("CPython %s (unsupported): version %r, %d frames" % (sys.version.split()[0], version.value, count))
    return 0 if count == 0 and version.value == b"" else 1


def main():
    if not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return unsupported()
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
