"""Mirrors torch.ops.aten, the op namespace inductor's generated code calls."""
import torch


class _Aten:
    @staticmethod
    def gt(a, b):
        return a > b

    @staticmethod
    def lt(a, b):
        return a < b

    @staticmethod
    def ge(a, b):
        return a >= b

    @staticmethod
    def le(a, b):
        return a <= b

    @staticmethod
    def eq(a, b):
        return a == b

    @staticmethod
    def ne(a, b):
        return a != b

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def mul(a, b):
        return a * b

    @staticmethod
    def div(a, b):
        return a / b

    @staticmethod
    def bitwise_and(a, b):
        return a & b

    @staticmethod
    def index(a, indices):
        return a[indices[0]]

    @staticmethod
    def sum(a, *args):
        return a.sum(*args)

    @staticmethod
    def nonzero(a):
        return a.nonzero()

    @staticmethod
    def item(a):
        return a.item()

    @staticmethod
    def abs(a):
        return a.abs()


aten = _Aten()
__all__ = ["aten", "torch"]
