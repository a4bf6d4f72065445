"""Mirrors torch/_tensor_str.py, reduced to 0-d and 1-d tensors: _Formatter reads the values
back one by one (masked_select, then per element a bool and an item()), as the real one does."""
import math

import torch


class __PrinterOptions:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = __PrinterOptions()


def tensor_totype(t):
    return t.to(dtype=torch.double)


class _Formatter:
    def __init__(self, tensor):
        self.floating_dtype = tensor.dtype.is_floating_point
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1

        with torch.no_grad():
            tensor_view = tensor.reshape(-1)

        if not self.floating_dtype:
            for value in tensor_view:
                value_str = f"{value}"
                self.max_width = max(self.max_width, len(value_str))

        else:
            nonzero_finite_vals = torch.masked_select(tensor_view, torch.isfinite(tensor_view) & tensor_view.ne(0))

            if nonzero_finite_vals.numel() == 0:
                # no valid number, do nothing
                return

            # Convert to double for easy calculation. HalfTensor overflows with 1e8, and there's no div() on CPU.
            nonzero_finite_abs = tensor_totype(nonzero_finite_vals.abs())
            nonzero_finite_min = tensor_totype(nonzero_finite_abs.min())
            nonzero_finite_max = tensor_totype(nonzero_finite_abs.max())

            for value in nonzero_finite_vals:
                if value != torch.ceil(value):
                    self.int_mode = False
                    break

            if self.int_mode:
                # in int_mode for floats, all numbers are integers, and we append a decimal to nonfinites
                # to indicate that the tensor is of floating type. add 1 to the len to account for this.
                if nonzero_finite_max / nonzero_finite_min > 1000.0 or nonzero_finite_max > 1.0e8:
                    self.sci_mode = True
                    for value in nonzero_finite_vals:
                        value_str = f"{{:.{PRINT_OPTS.precision}e}}".format(value)
                        self.max_width = max(self.max_width, len(value_str))
                else:
                    for value in nonzero_finite_vals:
                        value_str = f"{value:.0f}"
                        self.max_width = max(self.max_width, len(value_str) + 1)
            else:
                # Check if scientific representation should be used.
                if (nonzero_finite_max / nonzero_finite_min > 1000.0 or nonzero_finite_max > 1.0e8
                        or nonzero_finite_min < 1.0e-4):
                    self.sci_mode = True
                    for value in nonzero_finite_vals:
                        value_str = f"{{:.{PRINT_OPTS.precision}e}}".format(value)
                        self.max_width = max(self.max_width, len(value_str))
                else:
                    for value in nonzero_finite_vals:
                        value_str = f"{{:.{PRINT_OPTS.precision}f}}".format(value)
                        self.max_width = max(self.max_width, len(value_str))

        if PRINT_OPTS.sci_mode is not None:
            self.sci_mode = PRINT_OPTS.sci_mode

    def width(self):
        return self.max_width

    def format(self, value):
        if self.floating_dtype:
            if self.sci_mode:
                ret = f"{{:{self.max_width}.{PRINT_OPTS.precision}e}}".format(value)
            elif self.int_mode:
                ret = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    ret += "."
            else:
                ret = f"{{:.{PRINT_OPTS.precision}f}}".format(value)
        else:
            ret = f"{value}"
        return (self.max_width - len(ret)) * " " + ret


def _scalar_str(self, formatter):
    return formatter.format(self.item())


def _vector_str(self, indent, formatter):
    def _val_formatter(val, formatter=formatter):
        return formatter.format(val)

    data = [_val_formatter(val) for val in self.tolist()]
    return "[" + ", ".join(data) + "]"


def _tensor_str(self, indent):
    if self.numel() == 0:
        return "[]"
    formatter = _Formatter(self)
    if self.dim() == 0:
        return _scalar_str(self, formatter)
    return _vector_str(self, indent, formatter)


def _add_suffixes(tensor_str, suffixes, indent):
    return tensor_str + ("" if not suffixes else ", " + ", ".join(suffixes)) + ")"


def _str_intern(inp, *, tensor_contents=None):
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    self = inp
    if self.is_cuda:
        suffixes.append("device='" + str(self.device) + "'")
    if self.dtype not in (torch.float32, torch.int64, torch.bool):
        suffixes.append("dtype=" + str(self.dtype))
    if tensor_contents is not None:
        tensor_str = tensor_contents
    else:
        tensor_str = _tensor_str(self, indent)
    if self.grad_fn is not None:
        suffixes.append("grad_fn=<Backward0>")
    elif self.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + tensor_str, suffixes, indent)


def _str(self, *, tensor_contents=None):
    with torch.no_grad():
        return _str_intern(self, tensor_contents=tensor_contents)
