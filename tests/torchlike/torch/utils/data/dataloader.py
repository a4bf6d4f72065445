"""Mirrors torch/utils/data/dataloader.py: DataLoader with its single-process iterator and its
multiprocessing iterator (forked workers, a result queue, and with pin_memory=True a Python
thread that pins every batch before the main thread receives it)."""
import itertools
import multiprocessing
import queue
import threading

import torch
from torch.utils.data._utils import collate, pin_memory as _pin_memory, worker as _worker


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=False, num_workers=0, collate_fn=None, pin_memory=False,
                 drop_last=False, pin_memory_device="", **kwargs):
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.collate_fn = collate_fn or collate.default_collate
        self.pin_memory = pin_memory
        self.drop_last = drop_last

    def _batches(self):
        indices = iter(range(len(self.dataset)))
        while True:
            batch = list(itertools.islice(indices, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)


class _SingleProcessDataLoaderIter:
    def __init__(self, loader):
        self._loader = loader
        self._batches = loader._batches()

    def __iter__(self):
        return self

    def __next__(self):
        indices = next(self._batches)
        data = self._loader.collate_fn([self._loader.dataset[i] for i in indices])
        if self._loader.pin_memory:
            data = _pin_memory.pin_memory(data)
        return data


class _MultiProcessingDataLoaderIter:
    def __init__(self, loader):
        self._loader = loader
        context = multiprocessing.get_context("fork")
        self._workers_done_event = context.Event()
        self._worker_result_queue = context.Queue()
        self._index_queues = []
        self._workers = []
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            w = context.Process(target=_worker._worker_loop,
                                args=(loader.dataset, index_queue, self._worker_result_queue,
                                      self._workers_done_event, loader.collate_fn, worker_id),
                                daemon=True)
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        if loader.pin_memory:
            self._pin_memory_thread_done_event = threading.Event()
            self._data_queue = queue.Queue()
            self._pin_memory_thread = threading.Thread(
                target=_pin_memory._pin_memory_loop,
                args=(self._worker_result_queue, self._data_queue, torch.cuda.current_device(),
                      self._pin_memory_thread_done_event, "cuda"),
                daemon=True)
            self._pin_memory_thread.start()
        else:
            self._data_queue = self._worker_result_queue
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._batches = loader._batches()
        for _ in range(2 * loader.num_workers):
            self._try_put_index()

    def _try_put_index(self):
        indices = next(self._batches, None)
        if indices is None:
            return
        self._index_queues[self._send_idx % len(self._index_queues)].put((self._send_idx, indices))
        self._send_idx += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._rcvd_idx >= self._send_idx:
            self._shutdown_workers()
            raise StopIteration
        while self._rcvd_idx not in self._task_info:
            idx, data = self._data_queue.get()
            self._task_info[idx] = data
        data = self._task_info.pop(self._rcvd_idx)
        self._rcvd_idx += 1
        self._try_put_index()
        if isinstance(data, Exception):
            self._shutdown_workers()
            raise data
        return data

    def _shutdown_workers(self):
        if not self._workers:
            return
        self._workers_done_event.set()
        for q in self._index_queues:
            q.put(None)
        for w in self._workers:
            w.join()
        self._workers = []
        if self._loader.pin_memory:
            self._pin_memory_thread_done_event.set()
            self._pin_memory_thread.join()

    def __del__(self):
        self._shutdown_workers()
