"""Mirrors torch/cuda/graphs.py: CUDAGraph over the native _CUDAGraph (at::cuda::CUDAGraph)."""
import torch
from torch._C import _call, _methods

_CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}  # cudaStreamCaptureMode


class CUDAGraph:
    def __init__(self):
        self._handle = _call("graph_new")

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            try:
                _methods["graph_dealloc"](handle)
            except Exception:  # interpreter shutdown
                pass

    def capture_begin(self, pool=None, capture_error_mode="global"):
        _call("graph_capture_begin", self._handle, _CAPTURE_MODES[capture_error_mode])

    def capture_end(self):
        _call("graph_capture_end", self._handle)

    def replay(self):
        _call("graph_replay", self._handle)


class graph:
    """Mirrors torch.cuda.graph: capture on a side stream inside the block."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.capture_stream = stream if stream is not None else torch.cuda.Stream()
        self.stream_ctx = torch.cuda.stream(self.capture_stream)
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.cuda.synchronize()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc):
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*exc)
        return False
