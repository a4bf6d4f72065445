"""Syncs the autograd engine's device thread makes while this thread waits in loss.backward(), for
the test of their attribution. Usage: backward_sync.py <libautograd_engine.so> <site-packages>

The site-packages folder holds the torch modules a backward pass goes through
(tests/programs/backward_fixture) and a framework with deep stacks. Every line marked
`# PLANTED <name>` is a site the test expects, with its count.
"""
import ctypes
import sys

sys.path.insert(0, sys.argv[2])

import deep_framework  # noqa: E402
import torch  # noqa: E402

engine = ctypes.CDLL(sys.argv[1])
ctypes.PyDLL(sys.argv[1]).engine_import()
torch._C = engine
STEPS = 3
SYNCS_PER_BACKWARD = 2


def train_step():
    loss = torch.Tensor(SYNCS_PER_BACKWARD)
    loss.backward()  # PLANTED backward


def evaluate():
    # The device thread works while this thread is not in backward: nothing to borrow.
    engine.run_on_device_thread(2)  # PLANTED not_in_backward


def main():
    if engine.engine_init() != 0:
        sys.exit("engine_init failed")
    for _ in range(STEPS):
        train_step()
    evaluate()
    deep_framework.fit(engine, 100)  # PLANTED deep


if __name__ == "__main__":
    main()
