"""A small real PyTorch training loop for scripts/gpu-check.

Known habits at known lines (each marked `# GPU-CHECK <name>`): the DataLoader does not pin memory
(every batch is a pageable H2D copy), the loss is read with `.item()` each step, predictions are
moved with `.cpu()` every second step, and `nonzero()` picks the wrong answers each step.
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = 50


def accuracy(logits, labels):
    predictions = logits.argmax(1).cpu()  # GPU-CHECK cpu
    return (predictions == labels.cpu()).float().mean()


def main():
    device = torch.device("cuda")
    data = TensorDataset(torch.randn(STEPS * 64, 256), torch.randint(0, 10, (STEPS * 64,)))
    loader = DataLoader(data, batch_size=64, pin_memory=False)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (inputs, labels) in enumerate(loader):
        inputs, labels = inputs.to(device), labels.to(device)
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        last_loss = loss.item()  # GPU-CHECK item
        wrong = (logits.argmax(1) != labels).nonzero()  # GPU-CHECK nonzero
        if step % 2 == 0:
            accuracy(logits, labels)
    print(f"done, last loss {last_loss:.3f}, {len(wrong)} wrong in the last batch")


if __name__ == "__main__":
    main()
