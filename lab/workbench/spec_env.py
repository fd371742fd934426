"""Which environment variables a sweep spec may name.

A spec names a variable wherever a key ends in ``_env`` (``publish.headers_env: {Authorization: TOKEN}``, an HTTP
strategy's ``headers_env``, an LLM's ``api_key_env``): raglab reads the variable and sends its value, as a header or
a key, to a URL the same spec gives. A CI job that sweeps specs from pull requests would hand its secrets to
whoever wrote the spec. So a spec may name only variables starting with :data:`ALLOWED_PREFIX`, or those the
person running it lists with ``lab sweep --allow-env NAME``; any other is refused with one line (file, line, key,
variable) before any work.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import yaml

from lab.core.errors import ConfigError
from lab.core.net import env_names
from lab.core.yamlsafe import compose_yaml

#: Variables every spec may name (set them for raglab alone).
ALLOWED_PREFIX = "RAGLAB_"


def named_env(node: yaml.Node | None, prefix: str = "") -> Iterator[tuple[str, str, int]]:
    """``(key, variable, line)`` for each variable a composed spec names under a key ending in ``_env`` (its
    value: a name, a list of names, or a mapping whose values are names or ``Bearer $NAME`` templates)."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from named_env(item, prefix)
    if not isinstance(node, yaml.MappingNode):
        return
    for key, value in node.value:
        name = f"{prefix}{key.value}" if isinstance(key, yaml.ScalarNode) else prefix.rstrip(".")
        if isinstance(key, yaml.ScalarNode) and str(key.value).endswith("_env"):
            leaves = (value.value if isinstance(value, yaml.SequenceNode) else
                      [v for _, v in value.value] if isinstance(value, yaml.MappingNode) else [value])
            for leaf in leaves:
                if isinstance(leaf, yaml.ScalarNode) and str(leaf.value).strip():
                    for variable in env_names(str(leaf.value)):
                        yield name, variable, leaf.start_mark.line + 1
        else:
            yield from named_env(value, f"{name}.")


def check_spec_env(spec: str | Path, allow: Iterable[str] = ()) -> None:
    """Refuse (ConfigError, one line) a spec that names a variable not starting with :data:`ALLOWED_PREFIX` and
    not in ``allow``. A spec that cannot be read is left to the spec reader's own error."""
    allowed = set(allow)
    try:
        root = compose_yaml(Path(spec).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    for key, variable, line in named_env(root):
        if not variable.startswith(ALLOWED_PREFIX) and variable not in allowed:
            raise ConfigError(f"{spec}, line {line}, {key}: names the environment variable {variable}, whose value "
                              f"would be sent where the spec says; a spec may name only {ALLOWED_PREFIX}* variables: "
                              f"rerun with --allow-env {variable} if you trust this spec")
