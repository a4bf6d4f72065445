"""Mirrors torch/utils/data/_utils."""
from torch.utils.data._utils import collate, pin_memory, worker  # noqa: F401

MP_STATUS_CHECK_INTERVAL = 5.0
