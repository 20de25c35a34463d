#!/usr/bin/env python3
"""Writes the latest yardstick table into docs/benchmarks.md.

Reads a log of the team's yardstick (`run-tally.sh` writes the last one to
../shared/bench/logs/tally-last-run.txt), judges it with the yardstick's own
check_goals.py, and replaces what lies between the markers
`<!-- latest-table:start -->` and `<!-- latest-table:end -->` in
docs/benchmarks.md with: the date, machine and build, the ratio table with each
row's goals, the scale table if the run had one, and which goals were met.

The run id is left out (DESIGN.md, "Docs by audience": no run ids in the docs);
the date stands for it, and anything shaped like a run id is removed.

Usage: python3 scripts/bench-table.py [LOG] [--goals PATH_TO_check_goals.py] [--check]
  --check   print the section instead of writing it
"""
import contextlib
import importlib.util
import io
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "bench"
DEFAULT_LOG = BENCH / "logs" / "tally-last-run.txt"
DEFAULT_GOALS = BENCH / "tools" / "check_goals.py"
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- latest-table:start -->", "<!-- latest-table:end -->"
RUN_ID = re.compile(r"20[0-9]{6}T[0-9]{6}Z")


def load_goals(path):
    spec = importlib.util.spec_from_file_location("check_goals", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def header(path):
    """(date, machine, build, pinning) from the log's first comment lines."""
    date = machine = build = pinning = "?"
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("# Tally vs baselines"):
            m = re.search(r"\((\d{4}-\d\d-\d\d)T[0-9:]+Z\) on (.*)$", line.strip())
            if m:
                date, machine = m.group(1), m.group(2)
        elif line.startswith("# Tally: "):
            m = re.search(r"\(([^,]*), built ([^)]*)\); pinning: ([^;]*)", line)
            if m:
                build, pinning = f"{m.group(1)}, built {m.group(2)}", m.group(3)
    return date, machine, build, pinning


def row_name(row, key):
    return row.get(key, "").lstrip("! ").strip()


def goals_of(goals, name, notes):
    """The goals of check_goals.MAIN that apply to a main row, as text."""
    out = []
    for name_re, notes_re, col, op, bound in goals.MAIN:
        if re.search(name_re, name) and re.search(notes_re, notes):
            what = {"thr ratio": "ratio", "p99 ms": "p99 ms"}.get(col, col.replace("notes:", ""))
            out.append(f"{what} {'≥' if op == '>=' else '≤'} {bound:g}")
    return "; ".join(out) or "-"


def judged(goals, log):
    """check_goals' verdict lines, and its exit code."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = goals.main([str(log)])
    return out.getvalue().splitlines(), code


def section(log, goals):
    date, machine, build, pinning = header(log)
    main_rows, scale_rows = [], []
    for head, rows in goals.tables(str(log)):
        if head[0] == "Tally row":
            main_rows = rows
        elif head[0] == "scale row":
            scale_rows = rows
    verdicts, _ = judged(goals, log)
    summary = next((v for v in verdicts if v.startswith("perf:")), "perf: no verdict")
    short = [v[len("SHORT "):] for v in verdicts if v.startswith("SHORT")]
    lines = [
        f"Run of {date} on {machine}; build: {build}; pinning: {pinning}.",
        "Each ratio is Tally against its baseline measured in the same run;",
        "rows marked ! ran while other processes or the hypervisor took >= 5% of a core.",
        "",
        "| path | Tally | p99 ms | baseline (same run) | ratio | goals |",
        "|---|---|---|---|---|---|",
    ]
    for r in main_rows:
        flag = "! " if r.get("Tally row", "").startswith("!") else ""
        name = row_name(r, "Tally row")
        notes = r.get("notes", "")
        lines.append(
            f"| {flag}`{name}` | {r.get('throughput', '-')} | {r.get('p99 ms', '-')} | "
            f"{r.get('baseline (same run)', '-')}, {r.get('baseline thr', '-')} | "
            f"{r.get('thr ratio', '-')} | {goals_of(goals, name, notes)} |"
        )
    if scale_rows:
        lines += [
            "",
            "Scale: a big database (100,000 users, 1,000,000 payments by default) against a",
            "small one holding only the measured user's rows; big / small throughput, and",
            "the audit's wall time on the big one.",
            "",
            "| row | SQLite | PostgreSQL | goal |",
            "|---|---|---|---|",
        ]
        by_name = {}
        for r in scale_rows:
            full = r.get("scale row", "")
            m = re.match(r"^(!\s*)?(.*) \[(sqlite|postgres)\]$", full.strip())
            if not m or m.group(2).startswith("walk:"):
                continue
            audit = m.group(2).startswith("tally admin audit")
            value = r.get("big thr", "-") if audit else r.get("thr big/empty", "-")
            by_name.setdefault(m.group(2), {})[m.group(3)] = ("! " if m.group(1) else "") + value
        for name, cells in by_name.items():
            goal = "≤ 10 s" if name.startswith("tally admin audit") else "≥ 0.77"
            lines.append(f"| `{name}` | {cells.get('sqlite', '-')} | {cells.get('postgres', '-')} | {goal} |")
    lines += ["", f"**{summary.replace('perf: ', '')}** (`check_goals.py`)."]
    if short:
        lines.append("Short:")
        lines += [f"- {s}" for s in short]
    text = "\n".join(lines)
    return RUN_ID.sub("(run id)", text)


def main(argv):
    args = list(argv)
    check = "--check" in args
    if check:
        args.remove("--check")
    goals_path = DEFAULT_GOALS
    if "--goals" in args:
        i = args.index("--goals")
        goals_path = pathlib.Path(args[i + 1])
        del args[i : i + 2]
    log = pathlib.Path(args[0]) if args else DEFAULT_LOG
    if not log.is_file():
        print(f"no yardstick log at {log}: run ../shared/bench/run-tally.sh first", file=sys.stderr)
        return 1
    if not goals_path.is_file():
        print(f"no check_goals.py at {goals_path}", file=sys.stderr)
        return 1
    body = section(log, load_goals(goals_path))
    if check:
        print(body)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    if START not in doc or END not in doc:
        print(f"{DOC.relative_to(ROOT)} has no markers {START} … {END}", file=sys.stderr)
        return 1
    before, rest = doc.split(START, 1)
    after = rest.split(END, 1)[1]
    DOC.write_text(f"{before}{START}\n{body}\n{END}{after}", encoding="utf-8")
    print(f"{DOC.relative_to(ROOT)}: latest table written from {log.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
