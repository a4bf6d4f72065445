"""A small real PyTorch training loop for scripts/gpu-check.

Known habits, at known lines: the DataLoader does not pin memory (every batch is a pageable H2D
copy) and the loss is read back with `.item()` each step (a pageable D2H copy that blocks).
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = 50


def main():
    device = torch.device("cuda")
    data = TensorDataset(torch.randn(STEPS * 64, 256), torch.randint(0, 10, (STEPS * 64,)))
    loader = DataLoader(data, batch_size=64, pin_memory=False)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print_every = loss.item()  # the hidden sync: one pageable D2H copy per step
    print(f"done, last loss {print_every:.3f}")


if __name__ == "__main__":
    main()
