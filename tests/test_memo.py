"""maskc.memo.per_object: one computation per object and arguments, told apart by identity, not equality."""

from maskc import memo
from maskc.memo import per_object


def test_a_value_is_made_once_per_object_and_arguments():
    calls = []

    @per_object
    def derived(obj, extra=0):
        calls.append((obj, extra))
        return len(obj) + extra

    a, b = [1, 2], [1, 2]  # equal, not the same object
    assert derived(a) == derived(a) == 2 and derived(b) == 2 and derived(a, 1) == 3
    assert [(id(obj), extra) for obj, extra in calls] == [(id(a), 0), (id(b), 0), (id(a), 1)]


def test_the_cache_starts_over_past_its_limit_and_never_confuses_objects():
    made = []

    @per_object
    def ident(obj):
        made.append(obj)
        return obj

    objects = [object() for _ in range(memo.PER_OBJECT_LIMIT + 5)]
    for obj in objects:
        assert ident(obj) is obj
    assert ident(objects[-1]) is objects[-1] and len(made) == len(objects)  # the last ones are still cached
    assert ident(objects[0]) is objects[0] and len(made) == len(objects) + 1  # the first were dropped
