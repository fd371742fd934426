"""lab.core.settings: ``key=value`` items (``--set``) into a nested mapping of YAML values."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.core.settings import parse_settings


def test_parse_settings_nests_dotted_keys_and_parses_yaml_values():
    assert parse_settings(["k1=1.2", "retrievers=[bm25, dense]", "dense.model=mpnet", "chunking.size=128"]) == {
        "k1": 1.2, "retrievers": ["bm25", "dense"], "dense": {"model": "mpnet"}, "chunking": {"size": 128}}
    # split at the first "=" only; an empty value is the empty string; true is a bool; a later item wins
    assert parse_settings(["filter=a=b", "prefix=", "flag=true", "k=1", "k=2"]) == {
        "filter": "a=b", "prefix": "", "flag": True, "k": 2}
    assert parse_settings(None) == {} and parse_settings([]) == {}


def test_parse_settings_names_the_option_and_the_item_in_errors():
    with pytest.raises(ConfigError, match=r"^--set 'k1': expected key=value, e.g. --set k1=1.2$"):
        parse_settings(["k1"])
    with pytest.raises(ConfigError, match=r"^--param 'x=\[a': the value is not a valid YAML scalar or list"):
        parse_settings(["x=[a"], option="--param")
