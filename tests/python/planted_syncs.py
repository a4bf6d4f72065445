"""Synchronisations planted at known lines, for the hidden-sync audit's end-to-end test.

Every line marked `# PLANTED <name>` must appear in the report with exactly the count the test
expects; nothing else may. This is PyTorch code; the tests run it on the PyTorch stand-in
(tests/torchlike, on PYTHONPATH), whose native libraries make torch's CUDA calls through torch's
call chains.
"""
import threading

import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = 12


def loss_value(loss):
    return loss.item()  # PLANTED item


def accuracy(logits):
    return logits.cpu()  # PLANTED cpu


def metrics(logits):
    return accuracy(logits)


def train_step(step, weights):
    logits = weights * step
    loss = logits.sum()
    value = loss_value(loss)
    if step % 2 == 0:
        metrics(logits)
    (logits > 0).nonzero()  # PLANTED nonzero
    torch.cuda.synchronize()  # PLANTED synchronize
    return value


def background_eval(weights):
    for _ in range(5):
        weights.sum().item()  # PLANTED thread_item


def data_loader_workers(count):
    """DataLoader workers are forked; they make no CUDA call and must leave no trace."""
    dataset = TensorDataset(torch.randn(16, 4))
    for (batch,) in DataLoader(dataset, batch_size=4, num_workers=count):
        batch.sum()


def main():
    weights = torch.randn(256, device="cuda")
    data_loader_workers(2)
    for step in range(STEPS):
        train_step(step, weights)
    thread = threading.Thread(target=background_eval, args=(weights,))
    thread.start()
    thread.join()


if __name__ == "__main__":
    main()
