#!/usr/bin/env python3
"""include_cycles.py — the include cycles between source files of src/: a unit is a file without its extension
(foo.c and foo.h are one unit, foo), and unit A depends on unit B when a file of A includes a file of B
("dir/b.h" from src/). Prints each strongly connected group of two or more units (a circle of includes), or
"no include cycles". Usage: tools/include_cycles.py [SRC_DIR] [--under DIR ...] (only groups touching DIR).
Exit 0 either way: it reports, the reader judges."""
import os
import re
import sys

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def units(src):
    deps = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            unit = os.path.splitext(rel)[0]
            deps.setdefault(unit, set())
            with open(path, encoding="utf-8", errors="replace") as fh:
                for inc in INC.findall(fh.read()):
                    for cand in (inc, os.path.normpath(os.path.join(os.path.dirname(rel), inc))):
                        if os.path.exists(os.path.join(src, cand)):
                            dep = os.path.splitext(cand)[0]
                            if dep != unit:
                                deps[unit].add(dep)
                            break
    return deps


def sccs(graph):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main():
    args = sys.argv[1:]
    unders = []
    while "--under" in args:
        i = args.index("--under")
        unders.append(args[i + 1].rstrip("/"))
        del args[i : i + 2]
    src = args[0] if args else "src"
    groups = sccs(units(src))
    if unders:
        groups = [g for g in groups if any(u.startswith(d + "/") or u == d for u in g for d in unders)]
    for g in groups:
        print(" <-> ".join(g))
    if not groups:
        print("no include cycles")


if __name__ == "__main__":
    main()
