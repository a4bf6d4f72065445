#!/usr/bin/env python3
"""Generates the stand-in CUDA libraries' missing functions for the real PyTorch wheel.

Python loads torch's extension libraries with RTLD_NOW, and their CUDA references carry the real
libraries' symbol version nodes (libcudart.so.13, libcublas.so.13, NVSHMEM...). So each stand-in
must define every function any torch library references, under the right node, even one no test
calls. For each soname this writes LIB_stubs.c (one weak function per name, returning the library's
"not supported" status, logged once on stderr) and LIB.map (its version script). The names are the
union of the wheel's references (nm -D --undefined-only, versioned references by their verneed
file, unversioned ones by prefix) and the real library's exports where the CUDA toolkit has it.
Where the simulation implements a library (simcuda), --have KEY=ITS_LIBRARY leaves out what it
defines (weak aliases included): its stubs are linked into a copy of that library.

Usage: gen_stubs.py --torch-lib SITE/torch/lib --toolkit-lib /usr/local/cuda/lib64 --out DIR
                    [--have cudart=libcudart.so.13 ...]
"""
import argparse
import glob
import os
import re
import subprocess
import sys

# key, soname, version node (None: the real library is unversioned), pattern of its unversioned
# references, the status a missing function returns (the library's own "not supported").
LIBRARIES = [
    ("cudart", "libcudart.so.13", "libcudart.so.13", None, "801 /* cudaErrorNotSupported */"),
    ("cuda", "libcuda.so.1", None, r"cu[A-Z]", "801 /* CUDA_ERROR_NOT_SUPPORTED */"),
    ("nccl", "libnccl.so.2", None, r"p?nccl[A-Z]", "5 /* ncclInvalidUsage */"),
    ("cupti", "libcupti.so.13", "libcupti.so.13", None, "27 /* CUPTI_ERROR_NOT_SUPPORTED */"),
    ("cublas", "libcublas.so.13", "libcublas.so.13", None, "15 /* CUBLAS_STATUS_NOT_SUPPORTED */"),
    ("cublasLt", "libcublasLt.so.13", "libcublasLt.so.13", None, "15 /* CUBLAS_STATUS_NOT_SUPPORTED */"),
    ("cudnn", "libcudnn.so.9", "libcudnn.so.9", None, "3000 /* CUDNN_STATUS_NOT_SUPPORTED */"),
    ("cufft", "libcufft.so.12", "libcufft.so.12", None, "16 /* CUFFT_NOT_SUPPORTED */"),
    ("curand", "libcurand.so.10", "libcurand.so.10", None, "101 /* CURAND_STATUS_NOT_INITIALIZED */"),
    ("cusparse", "libcusparse.so.12", "libcusparse.so.12", None, "10 /* CUSPARSE_STATUS_NOT_SUPPORTED */"),
    ("cusolver", "libcusolver.so.12", "libcusolver.so.12", None, "9 /* CUSOLVER_STATUS_NOT_SUPPORTED */"),
    ("nvrtc", "libnvrtc.so.13", "libnvrtc.so.13", None, "11 /* NVRTC_ERROR_INTERNAL_ERROR */"),
    ("cusparseLt", "libcusparseLt.so.0", None, r"cusparseLt", "10 /* CUSPARSE_STATUS_NOT_SUPPORTED */"),
    ("cufile", "libcufile.so.0", None, r"cuFile", "5030 /* CU_FILE_PLATFORM_NOT_SUPPORTED */"),
    ("nvshmem", "libnvshmem_host.so.3", "NVSHMEM", r"nvshmem", "0 /* no PE, no symmetric address */"),
]

# Functions whose result is not a status: what a program reading it must see.
STRING_RESULT = re.compile(r"(GetErrorString|GetErrorName|GetStatusString|GetStatusName|ncclGetLastError)$")
VALUE_RESULT = {
    # torch.backends.cudnn compares the runtime's version with the one it was built with
    # (nvidia-cudnn-cu13 9.19.0 for the pinned wheel); a mismatch raises at the first cuDNN use.
    "cudnnGetVersion": "91900",
    "cudnnGetMaxDeviceVersion": "1000",
    "cudnnGetCudartVersion": "13000",
    "cublasGetCudartVersion": "13000",
    "cusparseLtGetVersion": "0",
}
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def dynamic_symbols(path, undefined):
    """(name, version) of a shared object's undefined or defined dynamic functions."""
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not undefined and (len(parts) < 3 or parts[1] not in "TWi"):
            continue
        name = parts[-1]
        version = None
        if "@" in name:
            name, _, version = name.partition("@")
            version = version.lstrip("@")
        if IDENTIFIER.match(name):
            yield name, version


def verneed_files(path):
    """Version node -> the file readelf -V names for it in a library's version needs."""
    out = subprocess.run(["readelf", "-V", "-W", path], capture_output=True, text=True, check=True).stdout
    nodes, current = {}, None
    for line in out.splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"Name: (\S+)", line)
        if m and current:
            nodes[m.group(1)] = current
    return nodes


def wanted_names(torch_lib, toolkit_lib):
    by_soname = {soname: set() for _, soname, *_ in LIBRARIES}
    libs = sorted(glob.glob(os.path.join(torch_lib, "*.so")) + glob.glob(os.path.join(torch_lib, "..", "_C*.so")))
    if not libs:
        sys.exit(f"gen_stubs: no torch libraries in {torch_lib}")
    for lib in libs:
        node_file = verneed_files(lib)
        for name, version in dynamic_symbols(lib, undefined=True):
            if version:
                soname = node_file.get(version)
                if soname in by_soname:
                    by_soname[soname].add(name)
                continue
            for _, soname, _, pattern, _ in LIBRARIES:
                if pattern and re.match(pattern, name):
                    by_soname[soname].add(name)
    for _, soname, *_ in LIBRARIES:
        real = os.path.join(toolkit_lib, "stubs", "libcuda.so") if soname == "libcuda.so.1" else \
            os.path.join(toolkit_lib, soname)
        if os.path.exists(real):
            by_soname[soname].update(name for name, _ in dynamic_symbols(real, undefined=False)
                                     if not name.startswith("_"))
    return by_soname


def stub_source(key, soname, status, names):
    out = [f"/* Generated by tests/realtorch/gen_stubs.py: {soname}'s functions the simulation lacks. */",
           "#include <stddef.h>", "#include <stdio.h>", "#include <stdlib.h>", "",
           "static void not_simulated(const char* name, int* logged) {",
           "  if (__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED)) return;",
           "  const char* quiet = getenv(\"SIMCUDA_STUBS_QUIET\");",
           "  if (quiet && *quiet == '1') return;",
           f"  fprintf(stderr, \"simcuda: {soname} %s is not simulated\\n\", name);",
           "}", ""]
    for name in sorted(names):
        if name in VALUE_RESULT:
            result, value = "size_t", VALUE_RESULT[name]
        elif STRING_RESULT.search(name) and key != "cuda" and key != "cudart":
            result, value = "const char*", f"\"{name}: not simulated\""
        else:
            result, value = "long", status
        out.append(f"__attribute__((weak, visibility(\"default\"))) {result} {name}(void) {{")
        out.append(f"  static int logged;")
        out.append(f"  not_simulated(\"{name}\", &logged);")
        out.append(f"  return {value};")
        out.append("}")
    return "\n".join(out) + "\n"


def version_script(node, names):
    exported = "".join(f"    {n};\n" for n in sorted(names))
    if node:
        return f"{node} {{\n  global:\n{exported}  local: *;\n}};\n"
    return f"{{\n  global:\n{exported}  local: *;\n}};\n"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-lib", required=True)
    ap.add_argument("--toolkit-lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--have", action="append", default=[], metavar="KEY=LIBRARY")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = wanted_names(args.torch_lib, args.toolkit_lib)
    have = dict(h.split("=", 1) for h in args.have)
    for key, soname, node, _, status in LIBRARIES:
        missing = set(names[soname])
        if key in have:
            missing -= {name for name, _ in dynamic_symbols(have[key], undefined=False)}
        write(os.path.join(args.out, f"{key}_stubs.c"), stub_source(key, soname, status, missing))
        write(os.path.join(args.out, f"{key}.map"), version_script(node, names[soname]))


if __name__ == "__main__":
    main()
