#!/usr/bin/env python3
"""The code's shape, kept (issue 23): no function over 80 lines outside the kernels and the tests
(as lizard measures a function's length, its lambdas counted in it), and no source file over
600 lines in src/ or tests/. An exception, if one is ever needed, is listed below with the size
it has: it may shrink, never grow, and leaves the list once within the limits.
Exits 1 with every offence listed."""
from __future__ import annotations

import os
import sys

import lizard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600
SOURCES = (".cpp", ".h", ".cu", ".cuh")

# Known offenders, with the most lines each may still have (to be brought within the limits).
FUNCTIONS_OVER: dict[str, int] = {
}
FILES_OVER: dict[str, int] = {
}


def sources(top: str):
    for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(SOURCES):
                yield os.path.join(folder, name)


def main() -> int:
    problems = []
    seen_functions: set[str] = set()
    seen_files: set[str] = set()
    for top in ("src", "tests"):
        for path in sources(top):
            relative = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = sum(1 for _ in f)
            if lines > MAX_FILE_LINES:
                allowed = FILES_OVER.get(relative)
                seen_files.add(relative)
                if allowed is None:
                    problems.append(f"{relative}: {lines} lines, over {MAX_FILE_LINES}")
                elif lines > allowed:
                    problems.append(f"{relative}: {lines} lines, grown past its listed {allowed}")
            if top == "tests" or relative.startswith("src/kernels/"):
                continue
            for function in lizard.analyze_file(path).function_list:
                if function.length <= MAX_FUNCTION_LINES:
                    continue
                name = f"{relative}:{function.name}"
                allowed = FUNCTIONS_OVER.get(name)
                seen_functions.add(name)
                if allowed is None:
                    problems.append(f"{relative}:{function.start_line}: {function.name} has {function.length} lines, over {MAX_FUNCTION_LINES}")
                elif function.length > allowed:
                    problems.append(f"{relative}:{function.start_line}: {function.name} has {function.length} lines, grown past its listed {allowed}")
    for name in sorted(set(FUNCTIONS_OVER) - seen_functions):
        problems.append(f"{name} is within the limit now (or gone): take it off FUNCTIONS_OVER")
    for name in sorted(set(FILES_OVER) - seen_files):
        problems.append(f"{name} is within the limit now (or gone): take it off FILES_OVER")
    for problem in problems:
        print(problem)
    print(f"check_code_shape: {len(FUNCTIONS_OVER)} functions and {len(FILES_OVER)} files listed as over; "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
