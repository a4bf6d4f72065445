"""Mirrors torch/utils."""
