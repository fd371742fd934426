"""The one YAML reader for what a user hands raglab (sweep specs, ``--set`` values, inline LLM specs): PyYAML's
safe loader (no Python tags) with aliases bounded.

A YAML alias (``*a``) shares the node of its anchor (``&a``), so a short file can stand for a huge one ("billion
laughs": ten lists of ten aliases of the one before hold 10^9 leaves in a few hundred bytes). Loading it costs
little; whatever walks it afterwards (a grid expanded into configs, a config flattened or hashed) runs out of
memory. :func:`load_yaml` and :func:`compose_yaml` count the nodes the document stands for, each alias counted as
the whole node it points to, on the composed graph (memoised per node, so in time and memory bounded by the
text), and refuse a document whose aliases add more than :data:`ALIAS_NODE_LIMIT` nodes, or one that refers to
itself, with :class:`AliasBomb` (a ``yaml.YAMLError``: callers turn it into their usual one line).
"""
from __future__ import annotations

from typing import Any

import yaml

#: Nodes the aliases of one document may add to it (a real spec adds a few dozen).
ALIAS_NODE_LIMIT = 10_000


class AliasBomb(yaml.MarkedYAMLError):  # type: ignore[misc]  # PyYAML ships no types
    """A document whose aliases expand past :data:`ALIAS_NODE_LIMIT` nodes (or into themselves)."""


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    sizes: dict[int, int] = {}  # expanded size per node id; -1 while being counted (a node inside itself)
    distinct: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        known = sizes.get(key)
        if known == -1:
            raise AliasBomb(problem="an alias refers to the node that holds it (an endless document): refused",
                            problem_mark=node.start_mark)
        if known is not None:
            return known
        sizes[key] = -1
        distinct.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        if total - len(distinct) > ALIAS_NODE_LIMIT:
            raise AliasBomb(problem=f"its aliases expand it by more than {ALIAS_NODE_LIMIT:,} values (a YAML "
                            "alias bomb?): refused; write the values out instead of nesting aliases",
                            problem_mark=node.start_mark)
        sizes[key] = total
        return total

    try:
        size(root)
    except RecursionError:
        raise AliasBomb(problem="nested too deeply to read: refused", problem_mark=root.start_mark) from None


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)`` with aliases bounded (see the module docstring)."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def compose_yaml(text: str) -> yaml.Node | None:
    """``yaml.compose(text)`` (the node graph, with marks) under the safe loader, aliases bounded."""
    loader = _BoundedLoader(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()
