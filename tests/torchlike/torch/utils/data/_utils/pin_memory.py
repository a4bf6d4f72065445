"""Mirrors torch/utils/data/_utils/pin_memory.py: the pin-memory thread pins each batch
(Tensor.pin_memory(), i.e. the CUDA host allocator) before the main thread gets it."""
import queue

import torch


def _pin_memory_loop(in_queue, out_queue, device_id, done_event, device):
    if device == "cuda":
        torch.cuda.set_device(device_id)

    def do_one_step():
        try:
            r = in_queue.get(timeout=0.1)
        except queue.Empty:
            return
        idx, data = r
        if not done_event.is_set() and not isinstance(data, Exception):
            data = pin_memory(data, device)
        out_queue.put((idx, data))

    while not done_event.is_set():
        do_one_step()


def pin_memory(data, device=None):
    if isinstance(data, torch.Tensor):
        return data.pin_memory(device)
    if isinstance(data, (tuple, list)):
        return type(data)(pin_memory(sample, device) for sample in data)
    return data
