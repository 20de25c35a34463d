#!/usr/bin/env python3
"""Prints every file-level import cycle in src/ and exits 1 if there is one.

A file depends on another when it names an item of it: through a `use` of
`crate::`, `super::` or `self::` paths, or through such a path written inline
(also through a module imported by `use` and then named as `module::item`).
A path ending in a `mod.rs` item that the `mod.rs` only re-exports (`pub use`)
is followed to the file that defines it, so importing `crate::api::ApiError`
depends on `api/error.rs`, not on everything `api/mod.rs` registers. Declaring a
child module (`mod x;`) is not a dependency; naming its items (`x::item`) is.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
SKIP = {"main.rs"}  # the binary: it may import anything and nothing imports it


def module_path(file: Path) -> tuple:
    rel = file.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


FILES = {}
for f in ROOT.rglob("*.rs"):
    if f.name in SKIP:
        continue
    FILES[module_path(f)] = f


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def expand_use_tree(tree: str) -> list:
    """`a::{b, c::{d, e as f}}` → ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix: str, s: str):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(s[start:i])
                start = i + 1
        items.append(s[start:])
        for item in filter(None, items):
            brace = item.find("{")
            if brace >= 0:
                walk(prefix + item[:brace], item[brace + 1 : item.rindex("}")])
            else:
                out.append(prefix + item)

    walk("", tree)
    return out


def inline_depth(text: str):
    """For a position, how many inline `mod x { … }` blocks enclose it."""
    opens = {m.end() - 1 for m in re.finditer(r"\bmod\s+\w+\s*\{", text)}
    marks, stack, depth = [], [], 0
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i in opens)
            depth += i in opens
        elif ch == "}" and stack:
            depth -= stack.pop()
        marks.append(depth)
    return lambda pos: marks[pos] if pos < len(marks) else 0


def absolute(path: list, here: tuple, depth: int = 0) -> list:
    """Turns a `crate::`/`super::`/`self::` path into segments from the crate root.
    `depth` inline modules (`mod tests { … }`) enclose the path: their `super`
    is the file itself."""
    if path[0] == "crate":
        return path[1:]
    base = list(here)
    while path and path[0] in ("super", "self"):
        if path[0] == "super":
            if depth:
                depth -= 1
            else:
                base = base[:-1]
        path = path[1:]
    return base + path


REEXPORTS = {}  # module path -> {name: absolute path}
USES = {}  # module path -> list of absolute paths (and aliases)


def parse(mod: tuple):
    text = strip_comments(FILES[mod].read_text())
    depth_at = inline_depth(text)
    uses, reexports, aliases = [], {}, {}
    for m in re.finditer(r"(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        public = bool(m.group(1))
        for raw in expand_use_tree(m.group(2)):
            segs = raw.split("::")
            if segs[0] not in ("crate", "super", "self"):
                # a child module of this file, named without `self::`
                if mod + (segs[0],) in FILES:
                    segs = ["self"] + segs
                else:
                    continue
            if segs[-1] == "self":
                segs = segs[:-1]
            if segs[-1] == "*":
                continue
            full = absolute(segs, mod, depth_at(m.start()))
            name = full[-1]
            if public:
                reexports[name] = full
            if tuple(full) in FILES:
                aliases[name] = full
            else:
                uses.append(full)
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", text):
        segs = m.group(1).split("::")
        uses.append(absolute(segs, mod, depth_at(m.start())))
    # A parent names its children's items by the child's name (`account::show`).
    children = set()
    for child in re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, flags=re.M):
        if mod + (child,) in FILES and child not in aliases:
            aliases[child] = list(mod + (child,))
            children.add(child)
    for name, full in aliases.items():
        hits = re.findall(r"(?<![\w:])" + name + r"((?:::\w+)+)", text)
        if not hits and name not in children:
            uses.append(full)
        for rest in hits:
            uses.append(full + rest.split("::")[1:])
    USES[mod] = uses
    REEXPORTS[mod] = reexports


def resolve(path: list, seen=()) -> tuple:
    """The file that defines the item `path` names."""
    for cut in range(len(path), -1, -1):
        mod = tuple(path[:cut])
        if mod in FILES:
            rest = path[cut:]
            if rest and rest[0] in REEXPORTS.get(mod, {}) and (mod, rest[0]) not in seen:
                target = REEXPORTS[mod][rest[0]] + rest[1:]
                return resolve(target, seen + ((mod, rest[0]),))
            return mod
    return None


def main() -> int:
    for mod in FILES:
        parse(mod)
    graph = {mod: set() for mod in FILES}
    for mod, uses in USES.items():
        for path in uses:
            target = resolve(path)
            if target is not None and target != mod and target != ():
                graph[mod].add(target)
    # Tarjan's strongly connected components: every one larger than a file is a loop.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    name = lambda m: str(FILES[m].relative_to(ROOT.parent))
    for comp in comps:
        members = set(comp)
        print(f"import loop of {len(comp)} files:")
        for v in sorted(comp, key=name):
            inside = sorted(name(w) for w in graph[v] if w in members)
            print(f"  {name(v)} -> {', '.join(inside)}")
    if comps:
        return 1
    print(f"no import loop among {len(FILES)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
