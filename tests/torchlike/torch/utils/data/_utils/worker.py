"""Mirrors torch/utils/data/_utils/worker.py (PyTorch 2.4-2.9): the main function of a DataLoader
worker process. It names itself "pt_data_worker", reads batches of indices from its index queue,
fetches and collates them on the CPU and puts them on the result queue; it never touches CUDA."""
import os
import queue
from dataclasses import dataclass

import torch
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL


class ManagerWatchdog:
    # Mirrors ManagerWatchdog (not Windows): the worker ends when its parent has gone.
    def __init__(self):
        self.manager_pid = os.getppid()
        self.manager_dead = False

    def is_alive(self):
        if not self.manager_dead:
            self.manager_dead = os.getppid() != self.manager_pid
        return not self.manager_dead


@dataclass(frozen=True)
class _ResumeIteration:
    """Mirrors _ResumeIteration: a persistent worker's cue that the next epoch began."""

    seed: object = None


# Mirrors _worker_loop of the releases (PyTorch's main branch has since renamed it
# _process_worker_loop, named "pt_multiprocess_data_worker", which the kernel cuts to 15
# characters: "pt_multiprocess").
def _worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation, collate_fn, drop_last,
                 base_seed, init_fn, worker_id, num_workers, persistent_workers, shared_seed):
    try:
        torch.multiprocessing._set_thread_name("pt_data_worker")
        torch.manual_seed(base_seed + worker_id)
        from torch.utils.data.dataloader import _DatasetKind

        init_exception = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
        except Exception:  # noqa: BLE001  (sent to the main process with the first batch)
            init_exception = torch._utils.ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        watchdog = ManagerWatchdog()
        while watchdog.is_alive():
            try:
                r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):
                data_queue.put((r, None))
                fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
                continue
            elif r is None:
                break
            elif done_event.is_set():
                continue
            idx, index = r
            if init_exception is not None:
                data = init_exception
                init_exception = None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception:  # noqa: BLE001  (re-raised in the main process)
                    data = torch._utils.ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            data_queue.put((idx, data))
            del data, idx, index, r
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()
