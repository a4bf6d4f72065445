"""Mirrors torch/distributed/distributed_c10d.py for the NCCL backend: init_process_group (env://
rendezvous, eager init with device_id), new_group (split from the default group when it was
initialised eagerly, NCCL_SPLIT_NOCOLOR for ranks outside the group), all_reduce, barrier,
send/recv, batch_isend_irecv (a coalescing group on the collective communicator),
all_to_all_single and destroy_process_group.

The store is a FileStore in the temporary folder, named after MASTER_ADDR, MASTER_PORT and
TORCHELASTIC_RUN_ID; real torch's env:// rendezvous uses a TCPStore on MASTER_ADDR:MASTER_PORT.
"""
import contextlib
import ctypes
import os
import shutil
import tempfile
from datetime import timedelta

import torch
from torch.distributed._c10d import call
from torch.distributed.c10d_logger import _exception_logger

default_pg_timeout = timedelta(minutes=10)


class Backend(str):
    NCCL = "nccl"

    def __new__(cls, name):
        value = name.lower()
        if value != "nccl":
            raise ValueError(f"the torch stand-in has the NCCL backend only, not {name!r}")
        return str.__new__(cls, value)


class ReduceOp:
    """torch.distributed.ReduceOp (RedOpType), with the values of c10d::ReduceOp."""

    SUM, AVG, PRODUCT, MIN, MAX = 0, 1, 2, 3, 4


class Work:
    """torch._C._distributed_c10d.Work (a WorkNCCL)."""

    def __init__(self, handle):
        self._handle = handle

    def wait(self, timeout=None):
        milliseconds = 0 if timeout is None else int(timeout.total_seconds() * 1000)
        return bool(call("Work_wait", self._handle, milliseconds))

    def is_completed(self):
        return bool(call("Work_is_completed", self._handle))

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            with contextlib.suppress(Exception):
                call("Work_delete", handle)


def _work(handle):
    return Work(handle) if handle else None


class _Store:
    def __init__(self, handle):
        self._handle = handle

    def set_timeout(self, timeout):
        call("Store_set_timeout", self._handle, int(timeout.total_seconds() * 1000))

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            with contextlib.suppress(Exception):
                call("Store_delete", handle)


class FileStore(_Store):
    def __init__(self, file_name, world_size=-1):
        super().__init__(call("FileStore_new", file_name.encode(), world_size))


class PrefixStore(_Store):
    def __init__(self, prefix, store):
        super().__init__(call("PrefixStore_new", prefix.encode(), store._handle))
        self.underlying_store = store


class ProcessGroupNCCL:
    """torch._C._distributed_c10d.ProcessGroupNCCL."""

    supports_splitting = True
    supports_coalescing = True

    class Options:
        def __init__(self):
            self.is_high_priority_stream = False
            self.split_from = None
            self.split_color = 0
            self._timeout = default_pg_timeout

    def __init__(self, store, rank, size, options):
        split_from = options.split_from._handle if options.split_from else None
        self._handle = call("ProcessGroupNCCL_new", store._handle, rank, size,
                            1 if options.is_high_priority_stream else 0, split_from, options.split_color)
        self._store, self._rank, self._size = store, rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def eager_connect_single_device(self, device):
        call("ProcessGroupNCCL_eager_connect_single_device", self._handle, _device_index(device))

    def perform_nocolor_split(self, device):
        call("ProcessGroupNCCL_perform_nocolor_split", self._handle, _device_index(device))

    def _shutdown(self):
        call("ProcessGroupNCCL_shutdown", self._handle)

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            with contextlib.suppress(Exception):
                call("ProcessGroupNCCL_delete", handle)


class ProcessGroup:
    """torch._C._distributed_c10d.ProcessGroup: the group, dispatching to its (NCCL) backend."""

    def __init__(self, backend, store, rank, size):
        self._backend, self._store, self._rank, self._size = backend, store, rank, size
        self.bound_device_id = None

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def _get_backend(self, device=None):
        return self._backend

    def allreduce(self, tensors, op=ReduceOp.SUM, async_op=False):
        return _work(call("ProcessGroupNCCL_allreduce", self._backend._handle, tensors[0]._cdata, op,
                          1 if async_op else 0))

    def barrier(self, device=None):
        return _work(call("ProcessGroupNCCL_barrier", self._backend._handle,
                          -1 if device is None else _device_index(device)))

    def send(self, tensors, dst, tag=0):
        return _work(call("ProcessGroupNCCL_send", self._backend._handle, tensors[0]._cdata, dst))

    def recv(self, tensors, src, tag=0):
        return _work(call("ProcessGroupNCCL_recv", self._backend._handle, tensors[0]._cdata, src))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, async_op=False):  # noqa: A002
        return _work(call("ProcessGroupNCCL_alltoall_base", self._backend._handle, output._cdata, input._cdata,
                          1 if async_op else 0))

    def _start_coalescing(self, device):
        call("ProcessGroupNCCL_start_coalescing", self._backend._handle)

    def _end_coalescing(self, device):
        return _work(call("ProcessGroupNCCL_end_coalescing", self._backend._handle))


class GroupMember:
    WORLD = None
    NON_GROUP_MEMBER = object()


class _World:
    def __init__(self):
        self.default_pg = None
        self.pg_map = {}  # group -> (backend name, store)
        self.pg_group_ranks = {}  # group -> {global rank: group rank}
        self.pg_coalesce_state = {}
        self.group_count = 0


_world = _World()


def _device_index(device):
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


def is_nccl_available():
    return True


def is_initialized():
    return _world.default_pg is not None


def _get_default_group():
    if not is_initialized():
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    return _world.default_pg


def get_rank(group=None):
    return (group or _get_default_group()).rank()


def get_world_size(group=None):
    return (group or _get_default_group()).size()


def get_backend(group=None):
    return _world.pg_map[group or _get_default_group()][0]


def _env_rendezvous(rank, world_size, timeout):
    """rendezvous("env://"): rank and world size from the launcher, the store at MASTER_ADDR:PORT."""
    if rank < 0:
        rank = int(os.environ["RANK"])
    if world_size < 0:
        world_size = int(os.environ["WORLD_SIZE"])
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment "
                             f"variable {name} expected, but not set")
    where = "-".join([str(os.getuid()), os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
                      os.environ.get("TORCHELASTIC_RUN_ID", "")])
    path = os.path.join(tempfile.gettempdir(), f"torchlike-store-{where}")
    # A one-process job owns its store: whatever a previous job left there is stale.
    if world_size == 1 and rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    store = FileStore(path, world_size)
    store.set_timeout(timeout)
    return store, rank, world_size


def _process_group_color(ranks):
    """The split colour of a group: the hash of its ranks, within a C int."""
    max_c_int = 2 ** (ctypes.sizeof(ctypes.c_int) * 8 - 1)
    return abs(hash(tuple(ranks))) % max_c_int


def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                              timeout, device_id=None):
    is_default_group = len(global_ranks_in_group) == 0
    # Split only from a default group whose communicator was created eagerly (device_id bound).
    split_from = None
    if is_initialized() and _get_default_group().bound_device_id is not None:
        split_from = _get_default_group()._get_backend(_get_default_group().bound_device_id)
    if not is_default_group:
        global_rank = _get_default_group().rank()
        if global_rank not in global_ranks_in_group:
            # ncclCommSplit is collective over the parent: ranks outside the group take part too.
            if split_from:
                split_from.perform_nocolor_split(_get_default_group().bound_device_id)
            return GroupMember.NON_GROUP_MEMBER, None
    prefix_store = PrefixStore(f"{group_name}/", store)
    options = ProcessGroupNCCL.Options()
    options._timeout = timeout
    if split_from:
        options.split_from = split_from
        options.split_color = _process_group_color(global_ranks_in_group)
    backend_class = ProcessGroupNCCL(prefix_store, group_rank, group_size, options)
    pg = ProcessGroup(backend_class, prefix_store, group_rank, group_size)
    pg.bound_device_id = device_id
    if device_id is not None and backend_class.supports_splitting:
        backend_class.eager_connect_single_device(device_id)
    _world.pg_map[pg] = (Backend(backend), store)
    return pg, prefix_store


def _process_group_name():
    name = str(_world.group_count)
    _world.group_count += 1
    return name


@_exception_logger
def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice!")
    if init_method not in (None, "env://"):
        raise ValueError(f"the torch stand-in supports env:// rendezvous only, not {init_method}")
    timeout = timeout or default_pg_timeout
    if store is None:
        store, rank, world_size = _env_rendezvous(rank, world_size, timeout)
        store = PrefixStore("default_pg", store)
    if device_id is not None and not isinstance(device_id, torch.device):
        raise TypeError("device_id must be of type torch.device")
    default_pg, _ = _new_process_group_helper(world_size, rank, [], backend or "nccl", store,
                                              group_name or _process_group_name(), timeout, device_id=device_id)
    _world.pg_group_ranks[default_pg] = {i: i for i in range(world_size)}
    _world.default_pg = default_pg


@_exception_logger
def destroy_process_group(group=None):
    groups = list(_world.pg_map) if group is None or group is _world.default_pg else [group]
    for pg in groups:
        pg._get_backend()._shutdown()
        _world.pg_map.pop(pg, None)
        _world.pg_group_ranks.pop(pg, None)
    if group is None or group is _world.default_pg:
        _world.default_pg = None
        _world.pg_coalesce_state.clear()
        _world.group_count = 0


@_exception_logger
def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    default_pg = _get_default_group()
    global_rank = default_pg.rank()
    ranks = sorted(ranks) if ranks else list(range(default_pg.size()))
    group_rank = ranks.index(global_rank) if global_rank in ranks else None
    if device_id is None:
        device_id = default_pg.bound_device_id
    pg, _ = _new_process_group_helper(len(ranks), group_rank, ranks, backend or get_backend(default_pg),
                                      _world.pg_map[default_pg][1], _process_group_name(),
                                      timeout or default_pg_timeout, device_id=device_id)
    if pg is not GroupMember.NON_GROUP_MEMBER:
        _world.pg_group_ranks[pg] = {g: i for i, g in enumerate(ranks)}
    return pg


def _group_rank(group, global_rank):
    return global_rank if group is None or group is _world.default_pg else _world.pg_group_ranks[group][global_rank]


@_exception_logger
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    group = group or _get_default_group()
    work = group.allreduce([tensor], op, async_op)
    if async_op:
        return work
    if work is not None:
        work.wait()
    return None


@_exception_logger
def barrier(group=GroupMember.WORLD, async_op=False, device_ids=None):
    group = group or _get_default_group()
    if isinstance(device_ids, list):
        device = device_ids[0]
    elif group.bound_device_id is not None:
        device = group.bound_device_id
    else:
        device = torch.cuda.current_device()
    work = group.barrier(device)
    if async_op:
        return work
    if work is not None:
        work.wait()
    return None


@_exception_logger
def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    group = group or _get_default_group()
    return group.send([tensor], group_dst if group_dst is not None else _group_rank(group, dst), tag)


@_exception_logger
def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    group = group or _get_default_group()
    return group.recv([tensor], group_src if group_src is not None else _group_rank(group, src), tag)


@_exception_logger
def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    work = isend(tensor, dst, group, tag, group_dst)
    if work is not None:
        work.wait()


@_exception_logger
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    work = irecv(tensor, src, group, tag, group_src)
    if work is not None:
        work.wait()
    return src


class P2POp:
    """A point-to-point operation for batch_isend_irecv: isend or irecv, a tensor and a peer."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        self.op, self.tensor, self.group, self.tag = op, tensor, group, tag
        self.peer = peer
        self.group_peer = group_peer if group_peer is not None else _group_rank(group, peer)


class _CoalescingManager:
    def __init__(self):
        self.works = []

    def append(self, work=None):
        if work:
            self.works.append(work)

    def wait(self):
        for work in self.works:
            work.wait()


@contextlib.contextmanager
def _coalescing_manager(group=None, device=None, async_ops=False):
    """The calls inside the block are issued in one NCCL group (startCoalescing/endCoalescing)."""
    group = group or _get_default_group()
    op_list = _world.pg_coalesce_state.setdefault(group, [])
    if op_list:
        raise ValueError("ProcessGroup has non-empty op list at the start of coalescing")
    if device:
        group._start_coalescing(device)
    cm = _CoalescingManager()
    yield cm
    work = None
    _world.pg_coalesce_state.pop(group)
    if device:
        work = group._end_coalescing(device)
    if async_ops:
        cm.append(work)
    elif work is not None:
        work.wait()


@_exception_logger
def batch_isend_irecv(p2p_op_list):
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("Invalid ``p2p_op_list``. Each op is expected to to be of type ``torch.distributed.P2POp``.")
    group = p2p_op_list[0].group or _get_default_group()
    device = p2p_op_list[0].tensor.device
    # NCCL style coalescing: one group, on the collective communicator.
    with _coalescing_manager(group, device, async_ops=True) as cm:
        for p2p_op in p2p_op_list:
            key = "group_dst" if p2p_op.op is isend else "group_src"
            p2p_op.op(p2p_op.tensor, group=p2p_op.group, tag=p2p_op.tag, **{key: p2p_op.group_peer})
    return cm.works


@_exception_logger
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,  # noqa: A002
                      async_op=False):
    if output_split_sizes or input_split_sizes:
        raise NotImplementedError("the torch stand-in has all_to_all_single with equal splits only")
    group = group or _get_default_group()
    work = group.alltoall_base(output, input, [], [], async_op)
    if async_op:
        return work
    if work is not None:
        work.wait()
    return None
