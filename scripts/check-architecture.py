#!/usr/bin/env python3
"""Checks the module map of docs/architecture.md against the tree.

Every `.rs` file under src/ must have a line of its own in the map, and every
path the map names must exist. The map is the lines between
`<!-- module-map:start -->` and `<!-- module-map:end -->` that start with
"- `src/…`". Prints what is missing or stale and exits 1; prints one line and
exits 0 when they agree.

Usage (from the repo root, or anywhere): python3 scripts/check-architecture.py
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"
ENTRY = re.compile(r"^- `(src/[^`]+)`")


def mapped_paths(text):
    """The paths the map lists, in order, with the line number of each."""
    if START not in text or END not in text:
        sys.exit(f"{DOC.relative_to(ROOT)}: no module map (the markers {START} and {END})")
    offset = text[: text.index(START)].count("\n") + 1
    block = text[text.index(START) : text.index(END)].split("\n")
    return [(m.group(1), offset + i) for i, line in enumerate(block) if (m := ENTRY.match(line))]


def main():
    entries = mapped_paths(DOC.read_text(encoding="utf-8"))
    listed = {}
    problems = []
    for path, line in entries:
        if path in listed:
            problems.append(f"listed twice: {path} (lines {listed[path]} and {line})")
        listed.setdefault(path, line)
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "src").rglob("*.rs")}
    missing = sorted(tree - listed.keys())
    stale = sorted(set(listed) - tree)
    problems += [f"missing from the map: {p}" for p in missing]
    problems += [f"in the map but not in the tree: {p} (line {listed[p]})" for p in stale]
    doc = DOC.relative_to(ROOT)
    if problems:
        print(f"{doc}: the module map does not match src/:")
        for p in problems:
            print(f"  - {p}")
        print(f"Add a line \"- `src/…`: what it is for\" for each new file, and remove or rename the stale ones.")
        return 1
    print(f"{doc}: the module map lists all {len(tree)} files under src/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
