#!/usr/bin/env python3
"""Checks that no two files of a crate import each other, directly or through others.

Usage: scripts/module-cycles.py [SRC_DIR]   (default: kernels/src)

A file depends on another when it names an item defined there: in a `use` declaration or a
path in code (`crate::a::b`, `super::x`, `child::y`), with re-exports (`pub use`) followed to
the file that defines the item. Declaring a child module (`mod x;`) is not a dependency.
Prints every group of files that depend on each other in a cycle and exits with 1 if there
is one; prints the layers (files ordered so that each depends only on earlier ones) and
exits with 0 otherwise.
"""

import re
import sys
from pathlib import Path


def strip(code):
    """The code without comments, string and char literals (kept as blanks)."""
    out, i, n = [], 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif code.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if code.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif code.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == '"' or (c == "r" and re.match(r'r#*"', code[i:])):
            m = re.match(r'r(#*)"', code[i:])
            if m:
                end = code.find('"' + m.group(1), i + len(m.group(0)))
                i = end + 1 + len(m.group(1))
            else:
                i += 1
                while i < n and code[i] != '"':
                    i += 2 if code[i] == "\\" else 1
                i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", code[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", code[i:]).group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def inline_modules(code):
    """The code with each inline `mod name { … }` read as part of its file's module: its
    `super::` becomes `self::` (one level up from the inline module is the file itself)."""
    for m in reversed(list(re.finditer(r"\bmod\s+\$?\w+\s*\{", code))):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        code = code[: m.end()] + re.sub(r"\bsuper::", "self::", code[m.end() : i]) + code[i:]
    return code


def expand(tree):
    """The (path, name) pairs of a `use` tree: `a::{b, c::{d, e as f}}` gives (a::b, b),
    (a::c::d, d) and (a::c::e, f)."""
    tree = re.sub(r"\s+as\s+(\w+)", r"@\1", tree)
    tree = re.sub(r"\s+", "", tree)
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(tree):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(tree[start:i])
            start = i + 1
    parts.append(tree[start:])
    pairs = []
    for part in filter(None, parts):
        if "{" in part:
            head, _, rest = part.partition("{")
            pairs += [(head + path, name) for path, name in expand(rest[: rest.rindex("}")])]
        else:
            path, _, alias = part.partition("@")
            pairs.append((path, alias or path.split("::")[-1]))
    return pairs


class Crate:
    def __init__(self, src):
        self.files = {}  # module path (tuple of names) -> file
        for f in sorted(src.rglob("*.rs")):
            rel = f.relative_to(src).with_suffix("").parts
            path = () if rel in (("lib",), ("main",)) else rel[:-1] if rel[-1] == "mod" else rel
            self.files[path] = f
        self.code = {p: inline_modules(strip(f.read_text())) for p, f in self.files.items()}
        self.uses = {p: self.use_decls(p) for p in self.files}

    def children(self, module):
        return {p[-1] for p in self.files if len(p) == len(module) + 1 and p[: len(module)] == module}

    def absolute(self, module, segs):
        """`(base module, the segments after it)` of a path written in `module`, or None for
        a path that does not start in this crate (`std::…`, `half::…`)."""
        if segs[0] == "crate":
            return (), segs[1:]
        base, i = list(module), 0
        while i < len(segs) and segs[i] in ("self", "super"):
            if segs[i] == "super":
                base.pop()
            i += 1
        if i == 0 and segs[0] not in self.children(module):
            return None
        return tuple(base), segs[i:]

    def use_decls(self, module):
        """(path segments, name bound) of every `use` declaration of a module."""
        found = []
        for m in re.finditer(r"\buse\s+([^;]+);", self.code[module]):
            for path, name in expand(m.group(1)):
                segs = [s for s in path.split("::") if s]
                if segs:
                    found.append((segs, name))
        return found

    def defining(self, module, item, seen):
        """The module that defines the item `module` knows as `item`, through its `use`s."""
        if module + (item,) in self.files:
            return module + (item,)
        if (module, item) in seen:
            return None
        seen.add((module, item))
        for segs, name in self.uses[module]:
            if name == item or name == "*":
                start = self.absolute(module, segs if name == item else segs[:-1] + [item])
                found = start and self.resolve(*start, seen)
                if found:
                    return found
        return None if any(name == "*" for _, name in self.uses[module]) and seen else module

    def resolve(self, base, segs, seen=None):
        """The module that defines the item a path names (or the module the path is)."""
        seen = set() if seen is None else seen
        module = base
        for seg in segs:
            if module + (seg,) in self.files:
                module += (seg,)
            else:
                return self.defining(module, seg, seen) or module
        return module

    def dependencies(self, module):
        heads = ["crate", "super", "self"] + sorted(self.children(module))
        refs = [segs for segs, _ in self.uses[module]]
        code = re.sub(r"\buse\s+[^;]+;", ";", self.code[module])
        for m in re.finditer(r"(?<![\w:])((?:%s)(?:::\w+)+)" % "|".join(map(re.escape, heads)), code):
            refs.append(m.group(1).split("::"))
        deps = set()
        for segs in refs:
            start = self.absolute(module, segs)
            target = start and self.resolve(*start)
            if target is not None and target != module:
                deps.add(target)
        return deps


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                out.append(group)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "kernels/src")
    crate = Crate(src)

    def name(p):
        return str(crate.files[p].relative_to(src))

    graph = {p: crate.dependencies(p) for p in crate.files}
    found = cycles(graph)
    if found:
        for group in found:
            members = set(group)
            print("cycle among:", ", ".join(sorted(name(p) for p in group)))
            for p in sorted(group):
                inside = sorted(name(q) for q in graph[p] if q in members)
                print(f"  {name(p)} -> {', '.join(inside)}")
        return 1
    done, layers = set(), []
    while len(done) < len(graph):
        layer = sorted(p for p in graph if p not in done and graph[p] <= done)
        layers.append(layer)
        done.update(layer)
    print(f"no import cycle among the {len(graph)} files of {src}; layers, each using only earlier ones:")
    for i, layer in enumerate(layers):
        print(f"  {i}: {' '.join(name(p) for p in layer)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
