#!/usr/bin/env python3
"""Every mechanism id a comment cites ("SPEC D7", "SPEC P5/D7", "SPEC M1, M2") has a row in
docs/mechanisms.md; every file the docs and the README name (src/..., tests/..., docs/...)
exists, so docs/overview.md's walk can be followed; and nothing in the repository's code, docs,
benchmarks, scripts or tests points outside it (../shared). Exits 1 with the offending places
listed."""
from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "mechanisms.md")
CITATION = re.compile(r"SPEC ((?:[VPDM]\d+)(?:\s*(?:/|,|and)\s*[VPDM]\d+)*)")
ID = re.compile(r"[VPDM]\d+")
ROW = re.compile(r"^\| ([VPDM]\d+) \|(.*)$")
PATH = re.compile(r"`((?:src|tests|bench|scripts|docs)/[^`\s]+)`")
NAMED_FILE = re.compile(r"(?<![\w/.])((?:src|tests|bench|scripts|docs|fuzz|ui|data)/[\w/.\-]+\.(?:h|cpp|md|py|sh|jsonl|json|html|js))(?![\w])")
OUTSIDE = re.compile(r"\.\./shared|shared/(?:data|notes|seeds)/|shared/(?:SPEC|ARCHITECTURE|STYLE)\.md")
SCANNED = ("src", "docs", "bench", "scripts", "tests", "README.md", ".ci")
TEXT = (".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".cmake", ".json", ".toml", ".ini", "")


def files(top: str):
    path = os.path.join(ROOT, top)
    if os.path.isfile(path):
        yield path
        return
    for folder, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "corpus")]
        for name in names:
            if os.path.splitext(name)[1] in TEXT:
                yield os.path.join(folder, name)


def main() -> int:
    rows: dict[str, str] = {}
    with open(TABLE, encoding="utf-8") as f:
        for line in f:
            match = ROW.match(line)
            if match:
                rows[match.group(1)] = match.group(2)
    problems = []
    for mechanism, rest in rows.items():
        for path in PATH.findall(rest):
            if not os.path.exists(os.path.join(ROOT, path)):
                problems.append(f"docs/mechanisms.md: {mechanism} names {path}, which does not exist")
    for doc in sorted(os.listdir(os.path.join(ROOT, "docs"))) + ["../README.md"]:
        if not doc.endswith(".md"):
            continue
        relative = os.path.normpath(os.path.join("docs", doc))
        with open(os.path.join(ROOT, relative), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for path in NAMED_FILE.findall(line):
                    if not os.path.exists(os.path.join(ROOT, path)):
                        problems.append(f"{relative}:{number}: names {path}, which does not exist")
    cited = 0
    for top in SCANNED:
        for path in files(top):
            relative = os.path.relpath(path, ROOT)
            if relative == "scripts/check_mechanisms.py":
                continue
            try:
                text = open(path, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if relative.startswith("src/"):
                    for citation in CITATION.findall(line):
                        for mechanism in ID.findall(citation):
                            cited += 1
                            if mechanism not in rows:
                                problems.append(f"{relative}:{number}: SPEC {mechanism} has no row in docs/mechanisms.md")
                if OUTSIDE.search(line):
                    problems.append(f"{relative}:{number}: points outside the repository: {line.strip()[:100]}")
    for problem in problems:
        print(problem)
    print(f"check_mechanisms: {len(rows)} mechanisms, {cited} citations in src/, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
