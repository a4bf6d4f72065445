"""Mirrors torch/multiprocessing/__init__.py: Python's multiprocessing, re-exported (its default
context starts DataLoader workers: fork on Linux before Python 3.14), and _set_thread_name."""
import multiprocessing
from multiprocessing import *  # noqa: F401,F403

import torch

__all__ = multiprocessing.__all__


# Mirrors torch.multiprocessing._set_thread_name.
def _set_thread_name(name):
    torch._C._set_thread_name(name)
