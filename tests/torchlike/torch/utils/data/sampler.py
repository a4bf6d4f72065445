"""Mirrors torch/utils/data/sampler.py: the samplers DataLoader builds by default."""
import itertools
import random


class Sampler:
    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    def __init__(self, data_source, generator=None):
        self.data_source = data_source

    def __iter__(self):
        order = list(range(len(self.data_source)))
        random.shuffle(order)
        return iter(order)

    def __len__(self):
        return len(self.data_source)


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size, drop_last):
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    # Mirrors BatchSampler.__iter__: lists of batch_size indices, the last one shorter unless
    # drop_last.
    def __iter__(self):
        sampler_iter = iter(self.sampler)
        while True:
            batch = list(itertools.islice(sampler_iter, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size

