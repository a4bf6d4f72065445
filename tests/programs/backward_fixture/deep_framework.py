"""A framework whose own frames stand deep between the user's call and the sync (a Lightning or
HF Trainer loop): `depth` nested calls, then a Tensor.item()."""


def fit(engine, depth):
    if depth == 0:
        return engine.ft_item()
    return fit(engine, depth - 1)
