"""YAML → plain data plus the line of every key, so an error can say `FILE:LINE: key.path`.

PyYAML's composer keeps a mark on every node; we walk the node tree ourselves (safe tags only)
instead of using `safe_load`, which throws the marks away and silently keeps the last of two
duplicate keys. Anchors and aliases (`&box`, `*box`) and merge keys (`<<: *box`, YAML 1.1's
https://yaml.org/type/merge.html) work as in `safe_load`; a merged key's line is the line it is
written on, in the anchored mapping.
"""

from __future__ import annotations

from typing import Any

import yaml

from tfctl.inventory.errors import InventoryError

PathKey = tuple[str | int, ...]


def format_path(path: PathKey) -> str:
    """`("hosts", 1, "gpus")` → `hosts[1].gpus`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_with_lines(text: str, filename: str) -> tuple[Any, dict[PathKey, int]]:
    """Parse YAML text; return the data and a map from key path to its 1-based line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        if line is None and isinstance(getattr(exc, "position", None), int):
            # a ReaderError (control character) has a character offset instead of a mark
            line = text[: exc.position].count("\n") + 1  # type: ignore[attr-defined]
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InventoryError(filename, line, "", f"not valid YAML: {problem}",
                             "check the indentation and quoting on that line") from None
    lines: dict[PathKey, int] = {}
    if node is None:
        return None, lines
    data = _convert(node, (), lines, filename, [0])
    return data, lines


# An inventory has a few hundred values; aliases of aliases ("billion laughs") must not expand
# into millions of them.
MAX_VALUES = 100_000


def _convert(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], filename: str,
             count: list[int]) -> Any:
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise InventoryError(filename, node.start_mark.line + 1, format_path(path),
                             f"expands to more than {MAX_VALUES} values (aliases of aliases?)",
                             "write the values out instead of nesting aliases")
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                if merges:
                    raise InventoryError(filename, key_node.start_mark.line + 1,
                                         format_path((*path, "<<")),
                                         "`<<` appears twice in the same mapping",
                                         "merge several in one: `<<: [*first, *second]`")
                merges = _merge_sources(value_node, path, filename)
                continue
            key = _scalar(key_node, filename)
            if not isinstance(key, str):
                key = str(key)
            child = (*path, key)
            if key in out:
                raise InventoryError(filename, key_node.start_mark.line + 1, format_path(child),
                                     "this key appears twice in the same mapping",
                                     "keep one of them")
            lines[child] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, child, lines, filename, count)
        for source in merges:  # the keys written here win, then the first mapping merged
            _merge(out, source, path, lines, filename, count)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), lines, filename, count)
                for i, item in enumerate(node.value)]
    return _scalar(node, filename)


MERGE_TAG = "tag:yaml.org,2002:merge"


def _merge_sources(value: yaml.Node, path: PathKey, filename: str) -> list[yaml.Node]:
    """The mappings a `<<` key merges: one (`<<: *defaults`) or a list (`<<: [*a, *b]`)."""
    sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
    for source in sources:
        if not isinstance(source, yaml.MappingNode):
            kind = "a list" if isinstance(source, yaml.SequenceNode) else \
                f"the value {source.value!r}"
            raise InventoryError(filename, source.start_mark.line + 1, format_path((*path, "<<")),
                                 f"`<<` merges mappings into this one, not {kind}",
                                 "anchor a mapping (`gpu_box: &box {gpus: 4}`) and merge it: "
                                 "`<<: *box`, or several: `<<: [*a, *b]`")
    return list(sources)


def _merge(out: dict[Any, Any], source: yaml.Node, path: PathKey, lines: dict[PathKey, int],
           filename: str, count: list[int]) -> None:
    """YAML's merge key (https://yaml.org/type/merge.html): the keys of `source` this mapping
    lacks, each with the line where it is written (in the anchored mapping)."""
    theirs: dict[PathKey, int] = {}
    merged = _convert(source, path, theirs, filename, count)
    for key, value in merged.items():
        if key in out:
            continue
        out[key] = value
        child = (*path, key)
        for where, line in theirs.items():
            if where[: len(child)] == child:
                lines.setdefault(where, line)


def _scalar(node: yaml.Node, filename: str) -> Any:
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        raise InventoryError(filename, node.start_mark.line + 1, "",
                             "a mapping or list cannot be used as a key", "use a plain name")
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise InventoryError(filename, node.start_mark.line + 1, "",
                             f"value cannot be read: {getattr(exc, 'problem', exc)}",
                             "quote the value") from None
    finally:
        loader.dispose()
