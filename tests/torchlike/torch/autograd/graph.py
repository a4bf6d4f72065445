"""Mirrors torch/autograd/graph.py: _engine_run_backward calls the native engine
(Variable._execution_engine.run_backward, i.e. THPEngine_run_backward), which releases the GIL
and waits while the engine's device thread runs the backward. The method is called straight from
here, with no Python helper frame in between, so that, as in torch, _engine_run_backward is the
innermost Python frame of the waiting thread."""
from torch._C import _check, _methods


def _engine_run_backward(t_outputs, *args, **kwargs):
    run_backward = _methods["run_backward"]
    for root, grad in zip(t_outputs, args[0]):
        _check(run_backward(root._cdata, grad._cdata))
