"""Synchronisations planted at known lines, for the hidden-sync audit's end-to-end test.

Every line marked `# PLANTED <name>` must appear in the report with exactly the count the test
expects; nothing else may. The framework is tests/programs/fake_torch.cpp, reached through ctypes
(which releases the GIL, as torch does), so the calls below are what `loss.item()`, `.cpu()`,
`nonzero()` and `torch.cuda.synchronize()` do inside PyTorch.
"""
import ctypes
import os
import sys
import threading

ft = ctypes.CDLL(sys.argv[1])
ft.ft_item.restype = ctypes.c_double
ft.ft_nonzero.restype = ctypes.c_long
STEPS = 12


def loss_value():
    return ft.ft_item()  # PLANTED item


def accuracy():
    return ft.ft_cpu(ctypes.c_size_t(1024))  # PLANTED cpu


def metrics():
    return accuracy()


def train_step(step):
    ft.ft_busy(200)
    loss = loss_value()
    if step % 2 == 0:
        metrics()
    ft.ft_nonzero()  # PLANTED nonzero
    ft.ft_synchronize()  # PLANTED synchronize
    return loss


def background_eval():
    for _ in range(5):
        ft.ft_item()  # PLANTED thread_item


def data_loader_workers(count):
    """Forked like DataLoader workers: they make no CUDA call and must leave no trace."""
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            sum(range(10000))
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def main():
    if ft.ft_init() != 0:
        sys.exit("ft_init failed")
    data_loader_workers(2)
    for step in range(STEPS):
        train_step(step)
    thread = threading.Thread(target=background_eval)
    thread.start()
    thread.join()


if __name__ == "__main__":
    main()
