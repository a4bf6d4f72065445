"""Mirrors torch/_inductor/codecache.py: the generated module is written under the cache dir
(TORCHINDUCTOR_CACHE_DIR, default <tmp>/torchinductor_<user>) as <2 chars>/c<hash>.py and
imported from there (PyCodeCache.load_by_key_path)."""
import getpass
import hashlib
import importlib.util
import os
import tempfile

_HEADER = """
from torch.ops import aten
import torch


def call(args):
"""


def cache_dir():
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return configured
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())


def _write(source):
    key = "c" + hashlib.sha256(source.encode()).hexdigest()[:51]
    subdir = os.path.join(cache_dir(), key[1:3])
    os.makedirs(subdir, exist_ok=True)
    path = os.path.join(subdir, key + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return key, path


class PyCodeCache:
    modules = {}

    @classmethod
    def load_by_key_path(cls, body_lines):
        source = _HEADER + "".join(f"    {line}\n" for line in body_lines)
        key, path = _write(source)
        if key not in cls.modules:
            spec = importlib.util.spec_from_file_location(key, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            cls.modules[key] = module
        return cls.modules[key]
