"""Mirrors torch/distributed/__init__.py: the public API of distributed_c10d (NCCL backend)."""


def is_available():
    return True


from torch.distributed.distributed_c10d import (  # noqa: E402,F401
    Backend,
    GroupMember,
    P2POp,
    ProcessGroup,
    ReduceOp,
    Work,
    _coalescing_manager,
    all_reduce,
    all_to_all_single,
    barrier,
    batch_isend_irecv,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    irecv,
    is_initialized,
    is_nccl_available,
    isend,
    new_group,
    recv,
    send,
)
