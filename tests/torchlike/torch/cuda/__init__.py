"""Mirrors torch/cuda/__init__.py: synchronize, streams, events, the caching allocator's
empty_cache, CUDA graphs."""
import contextlib

import torch
from torch._C import _call
from torch.cuda.graphs import CUDAGraph, graph  # noqa: F401
from torch.cuda.streams import Event, Stream

_initialized = False


def is_available():
    return _call("_cuda_getDeviceCount") > 0


def device_count():
    return _call("_cuda_getDeviceCount")


def is_initialized():
    return _initialized


def _lazy_init():
    global _initialized
    _initialized = True


def current_device():
    return _call("_cuda_getDevice")


def set_device(device):
    """Mirrors torch.cuda.set_device: cudaSetDevice for the calling thread."""
    index = device if isinstance(device, int) else torch.device(device).index
    if index is not None and index >= 0:
        _call("_cuda_setDevice", index)


class device:
    def __init__(self, device):
        self.idx = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def synchronize(device=None):
    """Waits for all kernels in all streams on a CUDA device to complete."""
    _lazy_init()
    with torch.cuda.device(device):
        return _call("_cuda_synchronize")


def current_stream(device=None):
    _lazy_init()
    return Stream._from_handle(_call("_cuda_getCurrentStream"))


def default_stream(device=None):
    return Stream._from_handle(None)


def set_stream(stream):
    if stream is None:
        return
    _call("_cuda_setStream", stream.cuda_stream)


class StreamContext:
    """Mirrors torch.cuda.StreamContext: the stream is current inside the block."""

    def __init__(self, stream):
        self.stream = stream
        self.src_prev_stream = None

    def __enter__(self):
        if self.stream is None:
            return
        self.src_prev_stream = current_stream()
        set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return
        set_stream(self.src_prev_stream)


def stream(stream):
    return StreamContext(stream)


def empty_cache():
    """Releases all unoccupied cached memory held by the caching allocator."""
    if is_initialized():
        _call("_cuda_emptyCache")


@contextlib.contextmanager
def _noop():
    yield
