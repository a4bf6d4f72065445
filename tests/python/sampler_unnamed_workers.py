"""DataLoader workers left unnamed, as PyTorch before 2.0 left them (torch 1.13's
torch/utils/data/_utils/worker.py _worker_loop makes no _set_thread_name call), beside a forked
child that is no worker: for the sampler's census, which counts workers by the loop their main
thread is in, not by name alone. Run on the PyTorch stand-in (tests/torchlike), whose _worker_loop
sits in a file of that name. The loader lives about 1.5 s, past the census's one-second period.
"""
import os
import signal
import time

import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

torch.multiprocessing._set_thread_name = lambda name: None


class Decoded(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        time.sleep(0.3)
        return torch.randn(16)


def main():
    torch.zeros(16, device="cuda")
    other = os.fork()
    if other == 0:
        time.sleep(30)
        os._exit(0)
    try:
        for batch in DataLoader(Decoded(), batch_size=1, num_workers=2):
            batch.to("cuda")
    finally:
        os.kill(other, signal.SIGKILL)
        os.waitpid(other, 0)
    print("done")


if __name__ == "__main__":
    main()
