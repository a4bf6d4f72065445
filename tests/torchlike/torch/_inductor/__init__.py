"""Mirrors torch/_inductor."""
from torch._inductor import codecache  # noqa: F401
