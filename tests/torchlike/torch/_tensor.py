"""Mirrors torch/_tensor.py: the Python Tensor class. Its methods call the native bindings (the
C methods of torch._C.TensorBase in real torch); backward() goes through torch.autograd."""
import builtins
import ctypes

import torch
from torch._C import _call

_SCALAR_DTYPE = {builtins.bool: 11, builtins.int: 4, builtins.float: 7}


def _operand(other):
    """A Tensor operand by handle; a Python number as a wrapped scalar (value, dtype)."""
    if isinstance(other, Tensor):
        return other._cdata, 0.0, 0
    return None, builtins.float(other), _SCALAR_DTYPE[type(other) if type(other) in _SCALAR_DTYPE else builtins.float]


class Tensor:
    __slots__ = ("_cdata", "__weakref__")

    @classmethod
    def _wrap(cls, handle):
        t = object.__new__(cls)
        t._cdata = handle
        return t

    def __del__(self):
        handle = getattr(self, "_cdata", None)
        if handle:
            self._cdata = None
            try:
                torch._C._methods["dealloc"](handle)
            except Exception:  # interpreter shutdown
                pass

    def __reduce__(self):
        """Across processes (DataLoader workers) a CPU tensor travels as its bytes."""
        if self.is_cuda:
            raise RuntimeError("the stand-in does not share CUDA tensors between processes")
        data = ctypes.string_at(self.data_ptr(), self.numel() * self.element_size()) if self.numel() else b""
        return torch._utils._rebuild_tensor_from_bytes, (data, tuple(self.shape), self.dtype._code)

    # ---- properties ----
    @property
    def shape(self):
        return torch.Size(_call("size", self._cdata, d) for d in range(_call("dim", self._cdata)))

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return _call("dim", self._cdata)

    ndim = property(dim)

    def numel(self):
        return _call("numel", self._cdata)

    def __len__(self):
        return self.shape[0]

    @property
    def dtype(self):
        return torch._dtype_from_code(_call("dtype", self._cdata))

    @property
    def device(self):
        return torch.device("cuda:0" if self.is_cuda else "cpu")

    @property
    def is_cuda(self):
        return _call("device", self._cdata) == 1

    def data_ptr(self):
        return _call("data_ptr", self._cdata) or 0

    def element_size(self):
        return _call("element_size", self._cdata)

    def is_pinned(self):
        return builtins.bool(_call("is_pinned", self._cdata))

    def is_floating_point(self):
        return self.dtype.is_floating_point

    @property
    def requires_grad(self):
        return builtins.bool(_call("get_requires_grad", self._cdata))

    @requires_grad.setter
    def requires_grad(self, value):
        _call("set_requires_grad", self._cdata, 1 if value else 0)

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        handle = _call("get_grad", self._cdata)
        return Tensor._wrap(handle) if handle else None

    @property
    def grad_fn(self):
        return object() if _call("has_grad_fn", self._cdata) else None

    @property
    def data(self):
        return self.detach()

    # ---- reading values back (each one waits for the GPU) ----
    def item(self):
        value = _call("item", self._cdata)
        return self._python_scalar(value)

    def _python_scalar(self, value):
        if self.dtype is torch.bool:
            return builtins.bool(value)
        if not self.dtype.is_floating_point:
            return builtins.int(value)
        return value

    def __bool__(self):
        return builtins.bool(_call("bool_scalar", self._cdata))

    def __float__(self):
        return _call("float_scalar", self._cdata)

    def __int__(self):
        return builtins.int(_call("integral_scalar", self._cdata))

    def __index__(self):
        return builtins.int(_call("integral_scalar", self._cdata))

    def tolist(self):
        cpu = Tensor._wrap(_call("tolist", self._cdata))
        count = cpu.numel()
        flat = list((cpu.dtype._ctype * count).from_address(cpu.data_ptr())) if count else []
        flat = [self._python_scalar(v) for v in flat]
        shape = list(self.shape)
        if not shape:
            return flat[0]

        def nest(values, dims):
            if len(dims) == 1:
                return values
            step = len(values) // dims[0]
            return [nest(values[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]

        return nest(flat, shape)

    def __format__(self, format_spec):
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __repr__(self, *, tensor_contents=None):
        return torch._tensor_str._str(self, tensor_contents=tensor_contents)

    __str__ = __repr__

    # ---- moving between devices ----
    def cpu(self):
        return Tensor._wrap(_call("cpu", self._cdata))

    def cuda(self, device=None, non_blocking=False):
        torch.cuda._lazy_init()
        return Tensor._wrap(_call("cuda", self._cdata, 1 if non_blocking else 0))

    def to(self, *args, non_blocking=False, copy=False, dtype=None, device=None):
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
            elif isinstance(arg, (str, torch.device)):
                device = arg
            elif isinstance(arg, Tensor):
                dtype, device = arg.dtype, arg.device
        device_code = -1 if device is None else torch._device_code(device)
        dtype_code = -1 if dtype is None else dtype._code
        return Tensor._wrap(_call("to", self._cdata, device_code, dtype_code, 1 if non_blocking else 0, 1 if copy else 0))

    def pin_memory(self, device=None):
        return Tensor._wrap(_call("pin_memory", self._cdata))

    def record_stream(self, stream):
        _call("record_stream", self._cdata, stream.cuda_stream)

    def float(self):
        return self.to(torch.float32)

    def double(self):
        return self.to(torch.float64)

    def long(self):
        return self.to(torch.int64)

    def int(self):
        return self.to(torch.int32)

    def bool(self):
        return self.to(torch.bool)

    # ---- arithmetic and comparisons ----
    def _binary(self, op, other):
        handle, value, dtype = _operand(other)
        return Tensor._wrap(_call(op, self._cdata, handle, value, dtype))

    def __add__(self, other):
        return self._binary("add_Tensor", other)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary("sub_Tensor", other)

    def __rsub__(self, other):
        return (-self)._binary("add_Tensor", other)

    def __mul__(self, other):
        return self._binary("mul_Tensor", other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._binary("div_Tensor", other)

    def __gt__(self, other):
        return self._binary("gt_Tensor", other)

    def __lt__(self, other):
        return self._binary("lt_Tensor", other)

    def __ge__(self, other):
        return self._binary("ge_Tensor", other)

    def __le__(self, other):
        return self._binary("le_Tensor", other)

    def __eq__(self, other):
        return self._binary("eq_Tensor", other)

    def __ne__(self, other):
        return self._binary("ne_Tensor", other)

    __hash__ = object.__hash__

    def __and__(self, other):
        return self._binary("bitwise_and_Tensor", other)

    def __or__(self, other):
        return self._binary("bitwise_or_Tensor", other)

    def __neg__(self):
        return Tensor._wrap(_call("neg", self._cdata))

    def __invert__(self):
        return Tensor._wrap(_call("logical_not", self._cdata))

    def add(self, other):
        return self + other

    def mul(self, other):
        return self * other

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def gt(self, other):
        return self > other

    def lt(self, other):
        return self < other

    def abs(self):
        return Tensor._wrap(_call("abs", self._cdata))

    def ceil(self):
        return Tensor._wrap(_call("ceil", self._cdata))

    def isfinite(self):
        return Tensor._wrap(_call("isfinite", self._cdata))

    def mul_(self, other):
        _call("mul_", self._cdata, builtins.float(other))
        return self

    # ---- reductions ----
    def sum(self, dim=None, keepdim=False):
        return Tensor._wrap(_call("sum", self._cdata, 0 if dim is None else 1, dim or 0, 1 if keepdim else 0))

    def mean(self):
        return self.sum() * (1.0 / self.numel())

    def all(self):
        return Tensor._wrap(_call("reduce", self._cdata, 1))

    def any(self):
        return Tensor._wrap(_call("reduce", self._cdata, 2))

    def max(self):
        return Tensor._wrap(_call("reduce", self._cdata, 3))

    def min(self):
        return Tensor._wrap(_call("reduce", self._cdata, 4))

    def cumsum(self, dim):
        return Tensor._wrap(_call("cumsum", self._cdata, dim))

    # ---- indexing, views, copies ----
    def __getitem__(self, index):
        if isinstance(index, Tensor):
            return Tensor._wrap(_call("getitem", self._cdata, 2, index._cdata, 0, 0))
        if isinstance(index, slice):
            if index.step not in (None, 1):
                raise NotImplementedError("the stand-in slices with step 1 only")
            start = 0 if index.start is None else index.start
            stop = self.shape[0] if index.stop is None else index.stop
            return Tensor._wrap(_call("getitem", self._cdata, 1, None, start, stop))
        return Tensor._wrap(_call("getitem", self._cdata, 0, None, builtins.int(index), 0))

    def __setitem__(self, mask, value):
        _call("setitem", self._cdata, mask._cdata, builtins.float(value))

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def nonzero(self):
        return Tensor._wrap(_call("nonzero", self._cdata))

    def masked_select(self, mask):
        return torch.masked_select(self, mask)

    def unique(self, sorted=True, return_counts=False):  # noqa: A002
        return torch.unique(self, sorted=sorted, return_counts=return_counts)

    def clone(self):
        return Tensor._wrap(_call("clone", self._cdata))

    def detach(self):
        return Tensor._wrap(_call("detach", self._cdata))

    def view(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        return Tensor._wrap(_call("view", self._cdata, dims, len(shape)))

    reshape = view

    # ---- autograd ----
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Mirrors Tensor.backward: torch.autograd.backward(self, gradient, ...)."""
        torch.autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)
