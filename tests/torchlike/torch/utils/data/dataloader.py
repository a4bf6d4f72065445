"""Mirrors torch/utils/data/dataloader.py (PyTorch 2.4-2.9): DataLoader, and the iterators whose
frames a sampled stack shows while the main thread waits for a batch:

    DataLoader.__iter__ -> _BaseDataLoaderIter.__next__ -> self._next_data()
      _SingleProcessDataLoaderIter._next_data: the dataset is read in the main process
      _MultiProcessingDataLoaderIter._next_data -> _get_data -> _try_get_data
        -> self._data_queue.get(timeout=...): batches from forked workers (_utils.worker._worker_loop),
           through the pin-memory thread with pin_memory=True

Map-style datasets only (no IterableDataset, DataPipes or in_order=False)."""
import atexit
import itertools
import queue
import threading
import weakref

import torch
import torch.multiprocessing
from torch.utils.data import _utils
from torch.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

_persistent_workers_atexit_lock = threading.Lock()
_persistent_workers_atexit_registered = False
_persistent_workers_atexit = weakref.WeakSet()


class _DatasetKind:
    Map = 0

    # Mirrors _DatasetKind.create_fetcher.
    @staticmethod
    def create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last):
        return _utils.fetch._MapDatasetFetcher(dataset, auto_collation, collate_fn, drop_last)


class DataLoader:
    # Mirrors DataLoader.__init__: the default samplers, batch_size -> BatchSampler, prefetch_factor
    # 2 with workers.
    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device=""):
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self._dataset_kind = _DatasetKind.Map
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.collate_fn = collate_fn or (_utils.collate.default_collate if self._auto_collation
                                         else _utils.collate.default_convert)
        self.persistent_workers = persistent_workers
        self._iterator = None

    # Mirrors DataLoader._get_iterator.
    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    # Mirrors DataLoader.__iter__: persistent workers keep one iterator (and its worker processes)
    # for the loader's lifetime, reset at each epoch.
    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self):
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    # Mirrors _BaseDataLoaderIter.__init__.
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._shared_seed = None
        self._dataset_kind = loader._dataset_kind
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._pin_memory = loader.pin_memory and torch.cuda.is_available()
        self._pin_memory_device = "cuda" if self._pin_memory else None
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = 0
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def __iter__(self):
        return self

    # Mirrors _BaseDataLoaderIter._reset.
    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0

    # Mirrors _BaseDataLoaderIter._next_index.
    def _next_index(self):
        return next(self._sampler_iter)  # may raise StopIteration

    def _next_data(self):
        raise NotImplementedError

    # Mirrors _BaseDataLoaderIter.__next__ (its torch.autograd.profiler.record_function block only
    # names the call for the profiler: left out).
    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        return data

    def __len__(self):
        return len(self._index_sampler)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    # Mirrors _SingleProcessDataLoaderIter.__init__.
    def __init__(self, loader):
        super().__init__(loader)
        self._dataset_fetcher = _DatasetKind.create_fetcher(self._dataset_kind, self._dataset, self._auto_collation,
                                                            self._collate_fn, self._drop_last)

    # Mirrors _SingleProcessDataLoaderIter._next_data: the batch is read in the main process.
    def _next_data(self):
        index = self._next_index()  # may raise StopIteration
        data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
        if self._pin_memory:
            data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
        return data


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    # Mirrors _MultiProcessingDataLoaderIter.__init__: one index queue per worker, one result
    # queue, daemonic workers, and with pin_memory the pin-memory thread between the result queue
    # and the data queue the main thread reads.
    def __init__(self, loader):
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        multiprocessing_context = loader.multiprocessing_context or torch.multiprocessing
        self._worker_init_fn = loader.worker_init_fn
        self._worker_result_queue = multiprocessing_context.Queue()
        self._shutdown = False
        self._workers_done_event = multiprocessing_context.Event()
        self._index_queues = []
        self._workers = []
        for i in range(self._num_workers):
            index_queue = multiprocessing_context.Queue()
            index_queue.cancel_join_thread()
            w = multiprocessing_context.Process(
                target=_utils.worker._worker_loop,
                args=(self._dataset_kind, self._dataset, index_queue, self._worker_result_queue,
                      self._workers_done_event, self._auto_collation, self._collate_fn, self._drop_last,
                      self._base_seed, self._worker_init_fn, i, self._num_workers, self._persistent_workers,
                      self._shared_seed))
            w.daemon = True
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        if self._pin_memory:
            self._pin_memory_thread_done_event = threading.Event()
            self._data_queue = queue.Queue()
            pin_memory_thread = threading.Thread(
                target=_utils.pin_memory._pin_memory_loop,
                args=(self._worker_result_queue, self._data_queue, torch.cuda.current_device(),
                      self._pin_memory_thread_done_event, self._pin_memory_device))
            pin_memory_thread.daemon = True
            pin_memory_thread.start()
            self._pin_memory_thread = pin_memory_thread
        else:
            self._data_queue = self._worker_result_queue
        if self._persistent_workers and self._pin_memory:
            self._register_persistent_workers_atexit()
        self._reset(loader, first_iter=True)

    # Mirrors _MultiProcessingDataLoaderIter._reset: a persistent iterator's next epoch first tells
    # every worker to resume (_ResumeIteration) and waits for each to answer, then primes the
    # prefetch loop with prefetch_factor batches per worker.
    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._tasks_outstanding = 0
        self._workers_status = [True for _ in range(self._num_workers)]
        self._workers_num_tasks = [0 for _ in range(self._num_workers)]
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            for idx in range(self._num_workers):
                self._index_queues[idx].put(_utils.worker._ResumeIteration(self._shared_seed))
            resume_iteration_cnt = self._num_workers
            while resume_iteration_cnt > 0:
                return_idx, return_data = self._get_data()
                if isinstance(return_idx, _utils.worker._ResumeIteration):
                    resume_iteration_cnt -= 1
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    # Mirrors _MultiProcessingDataLoaderIter._try_get_data: one get with a timeout, and at the
    # timeout a check that no worker died.
    def _try_get_data(self, timeout=_utils.MP_STATUS_CHECK_INTERVAL):
        try:
            data = self._data_queue.get(timeout=timeout)
            return (True, data)
        except Exception as e:
            failed_workers = [w for worker_id, w in enumerate(self._workers)
                              if self._workers_status[worker_id] and not w.is_alive()]
            if failed_workers:
                pids_str = ", ".join(str(w.pid) for w in failed_workers)
                raise RuntimeError(f"DataLoader worker (pid(s) {pids_str}) exited unexpectedly") from e
            if isinstance(e, queue.Empty):
                return (False, None)
            raise

    # Mirrors _MultiProcessingDataLoaderIter._get_data: without a timeout, try again every
    # MP_STATUS_CHECK_INTERVAL seconds for as long as it takes.
    def _get_data(self):
        if self._timeout > 0:
            success, data = self._try_get_data(self._timeout)
            if success:
                return data
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
        elif self._pin_memory:
            while self._pin_memory_thread.is_alive():
                success, data = self._try_get_data()
                if success:
                    return data
            raise RuntimeError("Pin memory thread exited unexpectedly")
        else:
            while True:
                success, data = self._try_get_data()
                if success:
                    return data

    # Mirrors _MultiProcessingDataLoaderIter._next_data: batches in order, those that came early
    # kept in _task_info.
    def _next_data(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx, None)
                if info:
                    worker_id = info[0]
                    if len(info) == 2 or self._workers_status[worker_id]:
                        break
                    del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            if len(self._task_info[self._rcvd_idx]) == 2:
                worker_id, data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)
            else:
                worker_id = self._task_info.pop(idx)[0]
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

    # Mirrors _MultiProcessingDataLoaderIter._try_put_index: the next batch's indices to the next
    # worker in turn.
    def _try_put_index(self):
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                break
        else:
            return
        self._index_queues[worker_queue_idx].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._workers_num_tasks[worker_queue_idx] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    # Mirrors _MultiProcessingDataLoaderIter._process_data.
    def _process_data(self, data, worker_idx):
        self._workers_num_tasks[worker_idx] -= 1
        self._try_put_index()
        if isinstance(data, torch._utils.ExceptionWrapper):
            data.reraise()
        return data

    # Mirrors _MultiProcessingDataLoaderIter._shutdown_workers: the pin-memory thread first, then
    # the workers (done event, a None in each index queue, join).
    def _shutdown_workers(self):
        if _utils.python_exit_status is True or _utils.python_exit_status is None:
            return
        if self._shutdown:
            return
        self._shutdown = True
        try:
            if hasattr(self, "_pin_memory_thread"):
                self._pin_memory_thread_done_event.set()
                self._worker_result_queue.put((None, None))
                self._pin_memory_thread.join()
                self._worker_result_queue.cancel_join_thread()
                self._worker_result_queue.close()
            self._workers_done_event.set()
            for worker_id in range(len(self._workers)):
                if self._persistent_workers or self._workers_status[worker_id]:
                    self._index_queues[worker_id].put(None)
                    self._workers_status[worker_id] = False
            for w in self._workers:
                w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)
            for q in self._index_queues:
                q.cancel_join_thread()
                q.close()
        finally:
            for w in self._workers:
                if w.is_alive():
                    w.terminate()

    # Mirrors _clean_up_persistent_workers_atexit and _register_persistent_workers_atexit: persistent
    # workers and the pin-memory thread are shut down in order before the interpreter's own exit
    # handlers end the daemonic workers under the thread still reading from them.
    @staticmethod
    def _clean_up_persistent_workers_atexit():
        with _persistent_workers_atexit_lock:
            iterators = tuple(_persistent_workers_atexit)
        for iterator in iterators:
            iterator._shutdown_workers()

    def _register_persistent_workers_atexit(self):
        global _persistent_workers_atexit_registered
        with _persistent_workers_atexit_lock:
            _persistent_workers_atexit.add(self)
            if _persistent_workers_atexit_registered:
                return
            atexit.register(_MultiProcessingDataLoaderIter._clean_up_persistent_workers_atexit)
            _persistent_workers_atexit_registered = True

    def __del__(self):
        if hasattr(self, "_workers"):
            self._shutdown_workers()
