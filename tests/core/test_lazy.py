"""lab.core.lazy: a package's public names load from their module on first use and are then kept (PEP 562)."""
from __future__ import annotations

import sys

import pytest

import lab
from lab.core.lazy import lazy_exports


def test_a_public_name_is_imported_on_first_use_and_stored_in_the_namespace(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    namespace: dict[str, object] = {"__name__": "pkg", "VERSION": "1"}
    getattr_, _ = lazy_exports(namespace, {"rgb_to_hsv": "colorsys"})
    assert "colorsys" not in sys.modules  # nothing imported yet
    fn = getattr_("rgb_to_hsv")
    assert "colorsys" in sys.modules and fn is sys.modules["colorsys"].rgb_to_hsv
    assert namespace["rgb_to_hsv"] is fn  # later look-ups find it without __getattr__


def test_an_unknown_name_is_an_attribute_error_naming_the_package():
    getattr_, _ = lazy_exports({"__name__": "lab.x"}, {"a": "colorsys"})
    with pytest.raises(AttributeError, match="module 'lab.x' has no attribute 'nope'"):
        getattr_("nope")


def test_dir_lists_loaded_and_not_yet_loaded_names_sorted():
    _, dir_ = lazy_exports({"__name__": "pkg", "b": 1}, {"c": "m", "a": "m"})
    assert dir_() == ["__name__", "a", "b", "c"]


def test_lab_itself_loads_its_public_face_lazily():
    assert "evaluate" in dir(lab) and callable(lab.evaluate)
