"""lab.core.flat: dotted keys, MLflow param strings, canonical JSON and the config hash (pure functions)."""
from __future__ import annotations

import hashlib
import math

import pytest

from lab.core.errors import ConfigError
from lab.core.flat import (
    canonical_json,
    config_hash,
    flatten,
    flatten_values,
    format_value,
    nan_to_none,
    plain_copy,
    set_dotted,
    unflatten,
    varying_keys,
)

CONFIG = {"strategy": "bm25", "params": {"k1": 1.2, "b": 0.75, "stem": True}, "chunking": {}, "tags": ["a", "b"]}


def test_set_dotted_creates_nested_dicts_and_returns_the_config():
    config: dict = {}
    assert set_dotted(config, "params.k1", 1.2) is config
    assert config == {"params": {"k1": 1.2}}
    set_dotted(config, "params.b", 0.5)
    assert config == {"params": {"k1": 1.2, "b": 0.5}}


def test_set_dotted_merges_a_dict_into_a_dict_and_replaces_anything_else():
    config = {"params": {"k1": 1.2, "inner": {"x": 1}}}
    set_dotted(config, "params", {"inner": {"y": 2}, "b": 0.5})
    assert config == {"params": {"k1": 1.2, "inner": {"x": 1, "y": 2}, "b": 0.5}}
    set_dotted(config, "params.inner", 3)
    assert config["params"]["inner"] == 3


def test_set_dotted_through_a_scalar_names_the_key_and_the_blocking_part():
    with pytest.raises(ConfigError, match=r"key 'params.k1.x': 'params.k1' is 1.2, not a mapping"):
        set_dotted({"params": {"k1": 1.2}}, "params.k1.x", 1)


def test_set_dotted_stores_a_copy_not_the_callers_list():
    value = [1, [2]]
    config = set_dotted({}, "a", value)
    value[1].append(3)
    assert config == {"a": [1, [2]]}


def test_plain_copy_is_deep_turns_tuples_into_lists_and_keys_into_strings():
    src = {"a": {"b": [1, (2, 3)]}, 1: "x"}
    out = plain_copy(src)
    assert out == {"a": {"b": [1, [2, 3]]}, "1": "x"}
    out["a"]["b"].append(4)
    assert src["a"]["b"] == [1, (2, 3)]


def test_nan_to_none_only_touches_float_nan():
    assert nan_to_none(math.nan) is None
    assert nan_to_none(0.0) == 0.0 and nan_to_none("nan") == "nan" and nan_to_none(None) is None


def test_format_value_keeps_strings_and_writes_the_rest_as_compact_json():
    assert format_value("bm25") == "bm25"
    assert [format_value(v) for v in (1.2, True, None, ["a", "b"], {"z": 1, "a": 2})] == [
        "1.2", "true", "null", '["a","b"]', '{"a":2,"z":1}']
    assert format_value("é") == "é" and format_value(["é"]) == '["é"]'


def test_flatten_uses_dotted_keys_and_keeps_an_empty_dict_as_a_leaf():
    assert flatten(CONFIG) == {"strategy": "bm25", "params.k1": "1.2", "params.b": "0.75", "params.stem": "true",
                               "chunking": "{}", "tags": '["a","b"]'}
    assert flatten_values(CONFIG)["params.stem"] is True and flatten_values(CONFIG)["chunking"] == {}


def test_unflatten_inverts_flatten_values():
    assert unflatten(flatten_values(CONFIG)) == CONFIG


def test_canonical_json_and_hash_ignore_key_order():
    reordered = {"tags": ["a", "b"], "chunking": {}, "params": {"stem": True, "b": 0.75, "k1": 1.2},
                 "strategy": "bm25"}
    assert canonical_json(reordered) == canonical_json(CONFIG)
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert config_hash(reordered) == config_hash(CONFIG)


def test_config_hash_is_the_first_16_hex_digits_of_the_sha256_of_the_canonical_json():
    expected = hashlib.sha256(canonical_json(CONFIG).encode("utf-8")).hexdigest()[:16]
    assert config_hash(CONFIG) == expected and len(expected) == 16
    assert config_hash({**CONFIG, "strategy": "dense"}) != expected


def test_varying_keys_in_first_seen_order():
    a = {"strategy": "bm25", "params": {"k1": 1.2, "b": 0.75}}
    b = {"strategy": "bm25", "params": {"k1": 0.9, "b": 0.75}, "extra": 1}
    c = {"strategy": "dense", "params": {"k1": 1.2, "b": 0.75}}
    assert varying_keys([a, b, c]) == ["strategy", "params.k1", "extra"]
    assert varying_keys([a, a]) == [] and varying_keys([]) == []
