"""Mirrors torch/utils/data/_utils/worker.py: a forked worker fetches and collates batches on
the CPU and sends them back; it never touches CUDA."""
import queue


def _worker_loop(dataset, index_queue, data_queue, done_event, collate_fn, worker_id):
    while not done_event.is_set():
        try:
            r = index_queue.get(timeout=0.1)
        except queue.Empty:
            continue
        if r is None:
            break
        idx, batch_indices = r
        try:
            data = collate_fn([dataset[i] for i in batch_indices])
        except Exception as e:  # noqa: BLE001  (sent to the main process, as the real worker does)
            data = e
        data_queue.put((idx, data))
