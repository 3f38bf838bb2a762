"""YAML parsing that remembers the line of every key (for error messages), with
safe constructors only and duplicate keys rejected."""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

import yaml

from mlx_gateway.supervisor.config.errors import ConfigError

# --------------------------------------------------------------------------- YAML

_KeyPath = tuple[str | int, ...]
_T = TypeVar("_T")


class _Pos(NamedTuple):
    key_line: int
    value_line: int


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, again: int) -> None:
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def _check_duplicate_keys(node: yaml.Node, seen_nodes: set[int]) -> None:
    """Refuse a key given twice in one mapping (PyYAML would keep the last silently).

    Runs on the composed tree, before merge keys (``<<:``) are flattened into it:
    keys brought in by a merge may be overridden.
    """
    if id(node) in seen_nodes:  # aliases share nodes; recursive documents loop
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                line = key_node.start_mark.line + 1
                if key_node.value in lines:
                    raise _DuplicateKey(key_node.value, lines[key_node.value], line)
                lines[key_node.value] = line
            _check_duplicate_keys(value_node, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, seen_nodes)


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[_KeyPath, _Pos]]:
    """The document's data and the line of every key/item down to a few levels."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        _check_duplicate_keys(node, set())
        data = loader.construct_document(node)
        positions: dict[_KeyPath, _Pos] = {}
        _record_positions(loader, node, (), positions)
        return data, positions
    except _DuplicateKey as exc:
        raise ConfigError(
            f"duplicate key '{exc.key}' at {file}:{exc.again} (first given at line "
            f"{exc.first}); keep one of them",
            file=file,
            line=exc.again,
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        where = f"{file}:{line}" if line else file
        problem = exc.problem or exc.context or "malformed YAML"
        raise ConfigError(f"{where}: not valid YAML: {problem}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}", file=file) from None
    finally:
        loader.dispose()


def _record_positions(
    loader: yaml.SafeLoader, node: yaml.Node, path: _KeyPath, out: dict[_KeyPath, _Pos]
) -> None:
    if len(path) > 5:  # deep enough for every key we check; also stops alias cycles
        return
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            try:
                key = loader.construct_object(key_node, deep=True)
                hash(key)
            except Exception:  # an unhashable key already failed construction
                continue
            child = (*path, key)
            # Later pairs win, as in the constructed dict (keys merged with `<<:`).
            out[child] = _Pos(key_node.start_mark.line + 1, value_node.start_mark.line + 1)
            _record_positions(loader, value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            line = item.start_mark.line + 1
            out[child] = _Pos(line, line)
            _record_positions(loader, item, child, out)
