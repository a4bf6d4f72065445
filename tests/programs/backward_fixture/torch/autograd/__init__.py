from torch.autograd.graph import _engine_run_backward


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    # torch/autograd/__init__.py backward: normalises its arguments, then runs the engine
    if retain_graph is None:
        retain_graph = create_graph
    _engine_run_backward(
        (tensors,), (grad_tensors,), retain_graph, create_graph, inputs, allow_unreachable=True, accumulate_grad=True
    )
