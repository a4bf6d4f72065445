"""A stand-in for PyTorch, for trainshim's tests: the same Python API (the parts the tests use),
over native libraries that make the same CUDA calls through the same call chains as torch's
(torch/lib/libtorch_python.so -> libtorch_cpu.so -> libtorch_cuda.so -> libc10_cuda.so), on the
simulated CUDA runtime. Scripts written for real torch run on it unchanged:

    PYTHONPATH=<build>/torchlike/site-packages python3 train.py
"""
import builtins as _builtins
import ctypes as _ctypes

from torch import _C
from torch._C import _call


class dtype:
    def __init__(self, name, code, is_floating_point, itemsize, ctype):
        self._name, self._code, self.is_floating_point, self.itemsize, self._ctype = (
            name, code, is_floating_point, itemsize, ctype)

    def __repr__(self):
        return "torch." + self._name


int32 = dtype("int32", 3, False, 4, _ctypes.c_int32)
int64 = dtype("int64", 4, False, 8, _ctypes.c_int64)
float32 = dtype("float32", 6, True, 4, _ctypes.c_float)
float64 = dtype("float64", 7, True, 8, _ctypes.c_double)
bool = dtype("bool", 11, False, 1, _ctypes.c_bool)  # noqa: A001  (torch.bool, as in torch)
int, long, float, double = int32, int64, float32, float64  # noqa: A001
_DTYPES = {d._code: d for d in (int32, int64, float32, float64, bool)}


def _dtype_from_code(code):
    return _DTYPES[code]


class device:
    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        kind, _, number = str(spec).partition(":")
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {spec}")
        self.type = kind
        self.index = index if index is not None else (_builtins.int(number) if number else None)

    @property
    def _code(self):
        return 1 if self.type == "cuda" else 0

    def __eq__(self, other):
        other = device(other) if isinstance(other, str) else other
        return isinstance(other, device) and self.type == other.type

    def __hash__(self):
        return hash(self.type)

    def __repr__(self):
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Size(tuple):
    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return f"torch.Size([{', '.join(str(s) for s in self)}])"


from torch._tensor import Tensor  # noqa: E402
from torch import _tensor_str  # noqa: E402,F401
from torch import autograd  # noqa: E402
from torch import cuda  # noqa: E402
from torch import functional as _functional  # noqa: E402
from torch.functional import unique  # noqa: E402,F401


def _device_code(where):
    """torch::utils::device_lazy_init: a CUDA tensor initialises torch.cuda first."""
    code = 0 if where is None else device(where)._code
    if code == 1:
        cuda._lazy_init()
    return code


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    return (_ctypes.c_int64 * max(len(size), 1))(*size), len(size)


def _factory(handle, requires_grad=False):
    t = Tensor._wrap(handle)
    if requires_grad:
        t.requires_grad_(True)
    return t


def empty(*size, dtype=None, device=None, pin_memory=False, requires_grad=False):
    dims, ndim = _shape(size)
    return _factory(_call("empty", dims, ndim, (dtype or float32)._code, _device_code(device), pin_memory),
                    requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    dims, ndim = _shape((size,))
    if dtype is None:
        dtype = bool if isinstance(fill_value, _builtins.bool) else (
            int64 if isinstance(fill_value, _builtins.int) else float32)
    return _factory(_call("full", dims, ndim, _builtins.float(fill_value), dtype._code, _device_code(device)),
                    requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape_tuple(size), 0, dtype=dtype or float32, device=device, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape_tuple(size), 1, dtype=dtype or float32, device=device, requires_grad=requires_grad)


def _shape_tuple(size):
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, Size)) else tuple(size)


def empty_like(t, dtype=None, device=None):
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def zeros_like(t, dtype=None, device=None):
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None, memory_format=None):
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def randn(*size, dtype=None, device=None, requires_grad=False):
    dims, ndim = _shape(size)
    return _factory(_call("randn", dims, ndim, (dtype or float32)._code, _device_code(device)), requires_grad)


def randint(low, high=None, size=None, dtype=None, device=None):
    if high is None:
        low, high = 0, low
    dims, ndim = _shape((size,))
    return _factory(_call("randint", low, high, dims, ndim, _device_code(device)))


def arange(start, end=None, step=1, dtype=None, device=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        every_int = all(isinstance(v, _builtins.int) for v in (start, end, step))
        dtype = int64 if every_int else float32
    return _factory(_call("arange", _builtins.float(start), _builtins.float(end),
                          _builtins.float(step), dtype._code, _device_code(device)))


def _flatten(data):
    if isinstance(data, (list, tuple)):
        if not data:
            return [], (0,)
        parts = [_flatten(d) for d in data]
        return [v for values, _ in parts for v in values], (len(data),) + parts[0][1]
    return [data], ()


def tensor(data, dtype=None, device=None, requires_grad=False):
    if isinstance(data, Tensor):
        return data.clone().detach()
    values, shape = _flatten(data)
    if dtype is None:
        if values and all(isinstance(v, _builtins.bool) for v in values):
            dtype = bool
        elif all(isinstance(v, _builtins.int) for v in values):
            dtype = int64
        else:
            dtype = float32
    buffer = (_ctypes.c_double * max(len(values), 1))(*[_builtins.float(v) for v in values])
    dims, ndim = _shape((shape,))
    return _factory(_call("tensor", buffer, dims, ndim, dtype._code, _device_code(device)), requires_grad)


def nonzero(input):
    return input.nonzero()


def argwhere(input):
    return input.nonzero()


def masked_select(input, mask):
    return Tensor._wrap(_call("masked_select", input._cdata, mask._cdata))


def repeat_interleave(input, repeats=None, dim=None):
    if repeats is not None:
        raise NotImplementedError("the stand-in has torch.repeat_interleave(repeats) only")
    return Tensor._wrap(_call("repeat_interleave", input._cdata))


def equal(input, other):
    return _builtins.bool(_call("equal", input._cdata, other._cdata))


def bincount(input, weights=None, minlength=0):
    return Tensor._wrap(_call("bincount", input._cdata, minlength))


def histc(input, bins=100, min=0, max=0):  # noqa: A002
    return Tensor._wrap(_call("histc", input._cdata, bins, _builtins.float(min), _builtins.float(max)))


def stack(tensors):
    handles = (_ctypes.c_void_p * len(tensors))(*[t._cdata for t in tensors])
    return Tensor._wrap(_call("stack", handles, len(tensors)))


def isfinite(input):
    return input.isfinite()


def ceil(input):
    return input.ceil()


def abs(input):  # noqa: A001
    return input.abs()


def sum(input, dim=None, keepdim=False):  # noqa: A001
    return input.sum(dim, keepdim)


def _unique2(input, sorted=True, return_inverse=False, return_counts=False):  # noqa: A002
    counts = _ctypes.c_void_p()
    values = Tensor._wrap(_call("_unique2", input._cdata, 1 if return_counts else 0, _ctypes.byref(counts)))
    inverse = empty(0, dtype=int64, device=input.device)
    return values, inverse, Tensor._wrap(counts.value) if return_counts else empty(0, dtype=int64, device=input.device)


class no_grad:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def manual_seed(seed):
    return None


def is_tensor(obj):
    return isinstance(obj, Tensor)


def compile(model=None, **kwargs):  # noqa: A001
    """Mirrors torch.compile: dynamo's optimize() with inductor as the backend."""
    import torch._dynamo

    if model is None:
        return lambda fn: compile(fn, **kwargs)
    return torch._dynamo.optimize("inductor")(model)


from torch import utils  # noqa: E402,F401
import torch.utils.data  # noqa: E402,F401
from torch import ops  # noqa: E402,F401
from torch import _utils  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401
import torch._inductor  # noqa: E402,F401
