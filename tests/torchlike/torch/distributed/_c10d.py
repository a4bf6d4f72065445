"""torch._C._distributed_c10d: the bindings of libtorch_python's c10d part (named c10d_* in
torch._C's method table, see native/torch_python/distributed.cpp)."""
from torch._C import _call


def call(name, *args):
    """One binding, with a pending C++ error raised as RuntimeError (END_HANDLE_TH_ERRORS)."""
    return _call("c10d_" + name, *args)
