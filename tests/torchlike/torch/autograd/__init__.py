"""Mirrors torch/autograd/__init__.py: backward() builds the root gradients (_make_grads) and
runs the engine through _engine_run_backward."""
import torch
from torch.autograd.graph import _engine_run_backward


def _make_grads(outputs, grads):
    new_grads = []
    for out, grad in zip(outputs, grads):
        if grad is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            new_grads.append(torch.ones_like(out))
        else:
            new_grads.append(grad)
    return tuple(new_grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    tensors = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
    grad_tensors = (grad_tensors,) if grad_tensors is None or isinstance(grad_tensors, torch.Tensor) \
        else tuple(grad_tensors)
    grad_tensors_ = _make_grads(tensors, grad_tensors)
    _engine_run_backward(tensors, grad_tensors_, retain_graph, create_graph, inputs,
                         allow_unreachable=True, accumulate_grad=True)
