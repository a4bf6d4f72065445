"""A framework whose own frames stand deep between the user's call and the sync (a Lightning or
HF Trainer loop): `depth` nested calls, then a nonzero()."""


def fit(engine, depth):
    if depth == 0:
        return engine.engine_nonzero()
    return fit(engine, depth - 1)
