"""Mirrors torch/utils/data."""
from torch.utils.data.dataloader import DataLoader
from torch.utils.data.dataset import Dataset, TensorDataset

__all__ = ["DataLoader", "Dataset", "TensorDataset"]
