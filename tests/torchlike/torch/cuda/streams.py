"""Mirrors torch/cuda/streams.py: Stream and Event over the native _CudaStreamBase /
_CudaEventBase (THCPStream_*, THCPEvent_*)."""
import torch
from torch._C import _call, _methods


class Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        self._handle = _call("stream_new", priority)

    @classmethod
    def _from_handle(cls, handle):
        s = object.__new__(cls)
        s._handle = handle
        return s

    @property
    def cuda_stream(self):
        return self._handle or 0

    def wait_event(self, event):
        event.wait(self)

    def wait_stream(self, stream):
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self):
        return bool(_call("stream_query", self._handle))

    def synchronize(self):
        _call("stream_synchronize", self._handle)

    def __eq__(self, other):
        return isinstance(other, Stream) and self.cuda_stream == other.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def __repr__(self):
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x}>"


class Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._handle = _call("event_new", 1 if enable_timing else 0)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            try:
                _methods["event_dealloc"](handle)
            except Exception:  # interpreter shutdown
                pass

    def record(self, stream=None):
        if stream is None:
            stream = torch.cuda.current_stream()
        _call("event_record", self._handle, stream._handle)

    def wait(self, stream=None):
        if stream is None:
            stream = torch.cuda.current_stream()
        _call("event_wait", self._handle, stream._handle)

    def query(self):
        return bool(_call("event_query", self._handle))

    def synchronize(self):
        _call("event_synchronize", self._handle)
