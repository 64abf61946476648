"""Values derived once per object, for the immutable objects every call passes around (IR programs, generated
mask code, kernels' argument lists): found again by the object's identity, since equality would walk a whole
program (and hashing an argument list costs more than the value derived from it)."""

from __future__ import annotations

import functools

# Programs and mask code a process keeps derived values of before it starts over (a process compiles few masks).
PER_OBJECT_LIMIT = 64


def per_object(fn):
    """`fn(obj, *args)`, computed once per object and arguments. The cache holds `obj`, so that its id is not
    reused by another object while cached."""
    cache: dict[tuple, tuple[object, object]] = {}

    @functools.wraps(fn)
    def cached(obj, *args):
        key = (id(obj), *args)
        hit = cache.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = fn(obj, *args)
        if len(cache) >= PER_OBJECT_LIMIT:
            cache.clear()
        cache[key] = (obj, value)
        return value

    return cached
