"""Mirrors torch/utils/data/_utils/pin_memory.py: the pin-memory thread pins each batch
(Tensor.pin_memory(), i.e. the CUDA host allocator: cudaHostAlloc, or cudaHostRegister when so
configured) before the main thread gets it."""
import queue

import torch
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL


# Mirrors _pin_memory_loop.
def _pin_memory_loop(in_queue, out_queue, device_id, done_event, device):
    torch.multiprocessing._set_thread_name("pt_data_pin")
    if device == "cuda":
        torch.cuda.set_device(device_id)

    def do_one_step():
        try:
            r = in_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
        except queue.Empty:
            return
        idx, data = r
        if not done_event.is_set() and not isinstance(data, torch._utils.ExceptionWrapper):
            try:
                data = pin_memory(data, device)
            except Exception:  # noqa: BLE001  (re-raised in the main thread)
                data = torch._utils.ExceptionWrapper(where=f"in pin memory thread for device {device_id}")
            r = (idx, data)
        while not done_event.is_set():
            try:
                out_queue.put(r, timeout=MP_STATUS_CHECK_INTERVAL)
                break
            except queue.Full:
                continue

    while not done_event.is_set():
        do_one_step()


# Mirrors pin_memory: tensors pinned, containers rebuilt around them.
def pin_memory(data, device=None):
    if isinstance(data, torch.Tensor):
        return data.pin_memory(device)
    if isinstance(data, (tuple, list)):
        return type(data)(pin_memory(sample, device) for sample in data)
    return data
