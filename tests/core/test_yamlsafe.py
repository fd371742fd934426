"""lab.core.yamlsafe: YAML from a user is read safely with aliases bounded, a billion laughs refused in bounded
memory and time."""
from __future__ import annotations

import tracemalloc

import pytest
import yaml

from lab.core.yamlsafe import ALIAS_NODE_LIMIT, AliasBomb, compose_yaml, load_yaml

LAUGHS = ('a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
          + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)))


def test_a_billion_laughs_is_refused_in_bounded_memory():
    tracemalloc.start()
    try:
        with pytest.raises(AliasBomb) as exc:
            load_yaml(LAUGHS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(exc.value, yaml.YAMLError) and "alias bomb" in exc.value.problem
    assert peak < 5 * 2**20, peak  # the 9^9 leaves are never built
    with pytest.raises(AliasBomb):
        compose_yaml(LAUGHS)


def test_ordinary_aliases_and_plain_documents_load_as_safe_load_does():
    text = "base: &b {k1: 1.2, b: 0.75}\nruns: [*b, *b]\ngrid: {k: [1, 2, 3]}\n"
    assert load_yaml(text) == yaml.safe_load(text)
    many = "values: [" + ", ".join(map(str, range(ALIAS_NODE_LIMIT * 2))) + "]"  # big but no alias: fine
    assert len(load_yaml(many)["values"]) == ALIAS_NODE_LIMIT * 2
    with pytest.raises(yaml.constructor.ConstructorError):  # still the safe loader: no Python tags
        load_yaml("!!python/object/apply:os.system ['true']")


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(AliasBomb, match="refers to the node that holds it"):
        load_yaml("a: &a [1, *a]")
