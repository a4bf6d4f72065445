"""Mirrors torch/utils/data/_utils/__init__.py."""
import atexit

# How often a blocked queue get wakes up to check that the workers (or the main process) live.
MP_STATUS_CHECK_INTERVAL = 5.0

# Set when the interpreter exits: the iterator's shutdown is then left to the daemonic workers.
python_exit_status = False


def _set_python_exit_flag():
    global python_exit_status
    python_exit_status = True


atexit.register(_set_python_exit_flag)

from torch.utils.data._utils import collate, fetch, pin_memory, worker  # noqa: E402,F401
