"""Mirrors torch/_dynamo/eval_frame.py: _TorchDynamoContext.__call__ returns the wrapper _fn
that runs the compiled code in place of the user's function. Compilation traces the function
into a graph of aten ops (what dynamo's bytecode analysis produces), and hands it to inductor,
which writes and loads a Python module with a call(args) function."""
import functools

import torch
from torch._dynamo import config


class Unsupported(Exception):
    pass


class _Proxy:
    """A traced value: records every op applied to it (the FX proxy of dynamo's output graph)."""

    def __init__(self, graph, name):
        self._graph, self._name = graph, name

    def _op(self, op, *args):
        return self._graph.add(op, self, *args)

    def __gt__(self, other):
        return self._op("gt", other)

    def __lt__(self, other):
        return self._op("lt", other)

    def __ge__(self, other):
        return self._op("ge", other)

    def __le__(self, other):
        return self._op("le", other)

    def __add__(self, other):
        return self._op("add", other)

    __radd__ = __add__

    def __sub__(self, other):
        return self._op("sub", other)

    def __mul__(self, other):
        return self._op("mul", other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._op("div", other)

    def __and__(self, other):
        return self._op("bitwise_and", other)

    def __getitem__(self, index):
        if not config.capture_dynamic_output_shape_ops:
            raise Unsupported("dynamic shape operator: aten.nonzero.default")
        return self._graph.add("index", self, [index])

    def sum(self, *args):
        return self._op("sum", *args)

    def abs(self):
        return self._op("abs")

    def nonzero(self):
        if not config.capture_dynamic_output_shape_ops:
            raise Unsupported("dynamic shape operator: aten.nonzero.default")
        return self._op("nonzero")

    def item(self):
        raise Unsupported("Tensor.item")

    def __bool__(self):
        raise Unsupported("data dependent control flow")


class _Graph:
    def __init__(self, num_inputs):
        self.nodes = []
        self.inputs = [_Proxy(self, f"arg{i}_1") for i in range(num_inputs)]
        self._count = 0

    def add(self, op, *args):
        out = _Proxy(self, f"buf{self._count}")
        self._count += 1
        self.nodes.append((out, op, args))
        return out


def _render(value):
    if isinstance(value, _Proxy):
        return value._name
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return repr(value)


def _trace(fn, num_inputs):
    graph = _Graph(num_inputs)
    result = fn(*graph.inputs)
    outputs = result if isinstance(result, tuple) else (result,)
    return graph, outputs, isinstance(result, tuple)


def _compile(fn, num_inputs):
    """Mirrors convert_frame -> compile_fx: trace, then inductor's codegen (compile_fx_inner)."""
    try:
        graph, outputs, returns_tuple = _trace(fn, num_inputs)
    except Unsupported:
        return None  # a graph break: the function runs eagerly
    lines = [f"{', '.join(p._name for p in graph.inputs)}, = args", "args.clear()"]
    for out, op, args in graph.nodes:
        lines.append(f"{out._name} = aten.{op}({', '.join(_render(a) for a in args)})")
    lines.append(f"return ({', '.join(_render(o) for o in outputs)}, )")
    module = torch._inductor.codecache.PyCodeCache.load_by_key_path(lines)
    if returns_tuple:
        return lambda *args: module.call(list(args))
    return lambda *args: module.call(list(args))[0]


class _TorchDynamoContext:
    def __init__(self, backend):
        self.backend = backend

    def __call__(self, fn):
        compiled = {}

        @functools.wraps(fn)
        def _fn(*args, **kwargs):
            key = len(args)
            if key not in compiled:
                compiled[key] = _compile(fn, len(args)) if not kwargs else None
            if compiled[key] is None:
                return fn(*args, **kwargs)
            return compiled[key](*args)

        return _fn


class OptimizeContext(_TorchDynamoContext):
    pass


def optimize(backend="inductor", **kwargs):
    return OptimizeContext(backend)
