"""Mirrors torch/functional.py: torch.unique is _unique_impl over torch._unique2."""
import torch


def _unique_impl(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    if dim is not None:
        raise NotImplementedError("the stand-in has torch.unique without dim")
    output, inverse_indices, counts = torch._unique2(
        input, sorted=sorted, return_inverse=return_inverse, return_counts=return_counts)
    if return_inverse and return_counts:
        return output, inverse_indices, counts
    if return_counts:
        return output, counts
    if return_inverse:
        return output, inverse_indices
    return output


unique = _unique_impl
