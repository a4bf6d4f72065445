"""torch._C._distributed_c10d: the bindings of libtorch_python's c10d part.

Real torch registers them as a submodule of torch._C in c10d_init (torch/csrc/distributed/c10d/
init.cpp), which torch/distributed/__init__.py triggers through torch._C._c10d_init(). Here the
library's second export, torchlike_c10d_init(), returns their method table, bound as the rest of
torch._C is.
"""
import ctypes

from torch import _C

_C._lib.torchlike_c10d_init.restype = ctypes.POINTER(_C._MethodDef)


def _load():
    table = _C._lib.torchlike_c10d_init()
    methods = {}
    i = 0
    while table[i].name:
        methods[table[i].name.decode()] = _C._bind(table[i])
        i += 1
    return methods


_methods = _load()


def call(name, *args):
    """One binding, with a pending C++ error raised as RuntimeError (END_HANDLE_TH_ERRORS)."""
    return _C._check(_methods[name](*args))
