"""The modules of torch a backward pass goes through, under the names and paths an installed torch
has (the build copies them to backward_fixture/site-packages/torch/): trainshim recognises the
thread blocked in backward by them. torch._C is set by the test script to the autograd engine
stand-in, tests/programs/autograd_engine.cpp."""
_C = None

from torch import autograd  # noqa: E402,F401
from torch._tensor import Tensor  # noqa: E402,F401
