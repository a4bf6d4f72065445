"""Python frames whose file names are not source files (review section 7).

Every argument becomes the file name of a function (compile() takes any name, as a segment may
state any path) that synchronises the device once. Then three synchronisations from this file,
at the line marked AFTER, show that the collector went on collecting and reading real sources.
"""
import sys

from sim import check, cuda

for name in sys.argv[1:]:
    namespace = {"check": check, "cuda": cuda}
    exec(compile("def synchronize():\n    check(cuda.cudaDeviceSynchronize(), 'sync')\n", name, "exec"), namespace)
    namespace["synchronize"]()

for _ in range(3):
    check(cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")  # AFTER
