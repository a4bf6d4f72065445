import torch


def _engine_run_backward(t_outputs, *args, **kwargs):
    # torch/autograd/graph.py _engine_run_backward: Variable._execution_engine.run_backward(...)
    return torch._C.run_backward(t_outputs[0].syncs)
