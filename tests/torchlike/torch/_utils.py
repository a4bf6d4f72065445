"""Mirrors torch/_utils.py: rebuilding a tensor that crossed a process boundary."""
import ctypes


def _rebuild_tensor_from_bytes(data, shape, dtype_code):
    import torch

    t = torch.empty(shape, dtype=torch._dtype_from_code(dtype_code))
    if data:
        ctypes.memmove(t.data_ptr(), data, len(data))
    return t


class ExceptionWrapper:
    """Mirrors torch._utils.ExceptionWrapper: an exception of a DataLoader worker or of the
    pin-memory thread, re-raised in the main process."""

    def __init__(self, exc_info=None, where="in background"):
        import sys
        import traceback

        exc_info = exc_info or sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        raise self.exc_type(f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}")
