"""The real PyTorch loads on the simulated GPU and on nothing else: every torch library binds all its
symbols (RTLD_NOW, as Python loads extensions), the CUDA libraries mapped after CUDA's initialisation
are the simulated ones under site-packages/nvidia, and the device is the simulated one.
Run by CTest with the venv's python (scripts/torch-sim)."""
import ctypes
import glob
import os
import re
import sys

import torch

CUDA_LIBRARY = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cudnn|cufft|cufile|curand|cusolver|cusparse|cusparseLt"
                          r"|cupti|nccl|nvrtc|nvJitLink|nvshmem_host)\.so")
failures = []
site = os.path.dirname(os.path.dirname(torch.__file__))
simulated = os.path.join(site, "nvidia") + os.sep

for library in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*.so"))):
    try:
        ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        failures.append(f"{os.path.basename(library)} does not load with RTLD_NOW: {e}")

torch.cuda.init()
if torch.cuda.device_count() != int(os.environ.get("SIMCUDA_DEVICES", "1")):
    failures.append(f"device_count() = {torch.cuda.device_count()}, SIMCUDA_DEVICES = {os.environ.get('SIMCUDA_DEVICES')}")
name = torch.cuda.get_device_name(0)
if "simulated" not in name:
    failures.append(f"device 0 is {name!r}, not the simulated device")

with open("/proc/self/maps", encoding="utf-8") as maps:
    mapped = {line.split()[-1] for line in maps if "/" in line}
cuda = sorted(path for path in mapped if CUDA_LIBRARY.search(os.path.basename(path)))
for path in cuda:
    if not os.path.realpath(path).startswith(os.path.realpath(simulated)):
        failures.append(f"a CUDA library from outside the simulation is mapped: {path}")
for needed in ("libcudart.so.13", "libcuda.so.1", "libnccl.so.2", "libcublas.so.13", "libcudnn.so.9"):
    if not any(os.path.basename(path) == needed for path in cuda):
        failures.append(f"{needed} is not mapped")

for failure in failures:
    print("FAIL:", failure, file=sys.stderr)
print(f"{len(cuda)} CUDA libraries mapped, all from {simulated}" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
