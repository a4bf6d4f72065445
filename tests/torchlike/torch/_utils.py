"""Mirrors torch/_utils.py: rebuilding a tensor that crossed a process boundary."""
import ctypes


def _rebuild_tensor_from_bytes(data, shape, dtype_code):
    import torch

    t = torch.empty(shape, dtype=torch._dtype_from_code(dtype_code))
    if data:
        ctypes.memmove(t.data_ptr(), data, len(data))
    return t
