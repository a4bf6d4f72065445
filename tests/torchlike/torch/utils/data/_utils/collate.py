"""Mirrors torch/utils/data/_utils/collate.py: default_collate stacks tensors (in the worker)."""
import torch


def default_collate(batch):
    elem = batch[0]
    if isinstance(elem, torch.Tensor):
        return torch.stack(batch)
    if isinstance(elem, (tuple, list)):
        return type(elem)(default_collate(list(samples)) for samples in zip(*batch))
    if isinstance(elem, (int, float)):
        return torch.tensor(batch)
    return batch


def default_convert(data):
    """Mirrors default_convert (batch_size=None): samples go through unchanged."""
    return data
