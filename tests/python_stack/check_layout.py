"""Compiles layout.c against this interpreter's headers and compares the offsets it prints with
the layout python_stack.cpp resolved in this very process (its table, or for 3.13 the values read
from _PyRuntime's _Py_DebugOffsets). Usage:
check_layout.py --cc CC --source layout.c --include DIR [--include DIR] --probe libpython_stack_probe.so
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile


def parse(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cc", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--include", action="append", default=[])
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        program = os.path.join(scratch, "layout")
        includes = ["-I" + directory for directory in dict.fromkeys(args.include)]
        subprocess.run([args.cc, *includes, args.source, "-o", program], check=True)
        headers = parse(subprocess.run([program], check=True, capture_output=True, text=True).stdout)

    lib = ctypes.CDLL(args.probe)
    lib.probe_layout.argtypes = [ctypes.c_char_p, ctypes.c_int]
    buf = ctypes.create_string_buffer(1 << 16)
    if lib.probe_layout(buf, len(buf)) <= 0:
        print("python_stack resolved no layout for CPython %s" % sys.version.split()[0])
        return 1
    shim = parse(buf.value.decode())

    running = "%d.%d" % sys.version_info[:2]
    if headers.get("version") != running:
        print("headers are for %s, the interpreter is %s" % (headers.get("version"), running))
        return 1
    differences = [(key, headers.get(key), shim.get(key))
                   for key in sorted(set(headers) | set(shim)) if headers.get(key) != shim.get(key)]
    for key, header_value, shim_value in differences:
        print("%-40s headers=%s shim=%s" % (key, header_value, shim_value))
    print("CPython %s: %d layout values, %d differ"
          % (sys.version.split()[0], len(headers), len(differences)))
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
