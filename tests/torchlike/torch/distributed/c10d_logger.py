"""Mirrors torch/distributed/c10d_logger.py: the decorator every public collective goes through."""
import functools


def _exception_logger(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper
