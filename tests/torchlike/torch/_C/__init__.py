"""torch._C, the extension module: the native bindings of libtorch_python.

The real module is a CPython extension whose methods are PyMethodDef tables of hidden C
functions (THPVariable_*, THCP*). Here the library's one export, torchlike_methods(), returns the
same kind of table (name, signature, function pointer), and each entry is called through ctypes,
which releases the GIL around the call as the real bindings do (pybind11::gil_scoped_release).
"""
import ctypes
import os

_lib_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")

# torch/__init__.py _load_global_deps(): the CUDA runtime into the global scope.
ctypes.CDLL(os.path.join(_lib_dir, "libtorch_global_deps.so"), mode=os.RTLD_GLOBAL)
# The extension itself is loaded into a local scope, as Python loads extension modules.
_lib = ctypes.CDLL(os.path.join(_lib_dir, "libtorch_python.so"))


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("signature", ctypes.c_char_p), ("function", ctypes.c_void_p)]


_TYPES = {"v": None, "p": ctypes.c_void_p, "d": ctypes.c_double, "l": ctypes.c_int64, "s": ctypes.c_char_p}

_lib.torchlike_methods.restype = ctypes.POINTER(_MethodDef)
_lib.torchlike_take_error.restype = ctypes.c_char_p


def _bind(entry):
    result, _, args = entry.signature.decode().partition(":")
    prototype = ctypes.CFUNCTYPE(_TYPES[result], *[_TYPES[a] for a in args])
    return prototype(entry.function)


def _load_methods():
    table = _lib.torchlike_methods()
    methods = {}
    i = 0
    while table[i].name:
        methods[table[i].name.decode()] = _bind(table[i])
        i += 1
    return methods


_methods = _load_methods()


class _NativeError(RuntimeError):
    pass


def _check(value):
    """END_HANDLE_TH_ERRORS: a C++ error pending on this thread becomes a RuntimeError."""
    error = _lib.torchlike_take_error()
    if error is not None:
        raise _NativeError(error.decode())
    return value


def _call(name, *args):
    return _check(_methods[name](*args))


_libc = ctypes.CDLL(None)
_libc.pthread_self.restype = ctypes.c_ulong
_libc.pthread_setname_np.argtypes = [ctypes.c_ulong, ctypes.c_char_p]


def _set_thread_name(name):
    """Mirrors c10::setThreadName (torch._C._set_thread_name): pthread_setname_np on the calling
    thread, the name cut to the kernel's 15 characters."""
    _libc.pthread_setname_np(_libc.pthread_self(), name.encode()[:15])
