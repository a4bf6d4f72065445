"""Mirrors torch/_dynamo: optimize() wraps a function in an eval-frame context."""
from torch._dynamo import config  # noqa: F401
from torch._dynamo.eval_frame import optimize  # noqa: F401
