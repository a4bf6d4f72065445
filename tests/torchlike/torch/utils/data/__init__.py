"""Mirrors torch/utils/data."""
from torch.utils.data.dataloader import DataLoader
from torch.utils.data.dataset import Dataset, TensorDataset
from torch.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["BatchSampler", "DataLoader", "Dataset", "RandomSampler", "Sampler", "SequentialSampler", "TensorDataset"]
