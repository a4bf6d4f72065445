"""Mirrors torch/autograd/graph.py: _engine_run_backward calls the native engine
(Variable._execution_engine.run_backward, i.e. THPEngine_run_backward), which releases the GIL
and waits while the engine's device thread runs the backward."""
from torch._C import _call


def _engine_run_backward(t_outputs, *args, **kwargs):
    for root, grad in zip(t_outputs, args[0]):
        _call("run_backward", root._cdata, grad._cdata)
