#!/usr/bin/env python3
"""Fails when modules of one parent import each other in a cycle (a -> b -> ... -> a).

Each crate's `src/` is read file by file. A file's module path comes from its place in the
tree (`a/mod.rs` and `a.rs` are `a`); a reference is any `crate::x::y`, `super::x` or
`self::x` path, and `name::` for a module the file declares. An edge a -> b joins the two
children of the lowest module that holds both, so `kernels::avx2 -> kernels::blocks` is an
edge between siblings and `model::qwen -> load::config` one between `model` and `load`.
Test code (from `#[cfg(test)]` on) is left out: tests may reach anywhere.
"""
import re
import sys
from pathlib import Path

ROOTS = sys.argv[1:] or ["src", "crates/chat/src", "crates/engine/src", "crates/agent/src", "crates/graph/src", "crates/fuzz/src"]
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)::\{([^}]*)\}")


def module_of(root: Path, file: Path) -> list[str]:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return parts


def strip(text: str) -> str:
    text = text.split("#[cfg(test)]")[0]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def resolve(here: list[str], is_dir: bool, head: str, rest: list[str]) -> list[str]:
    if head == "crate":
        return rest
    # `super` from a file `a/b.rs` is `a`; from `a/b/mod.rs` also `a`.
    base = here[:-1] if head == "super" else here
    while rest and rest[0] == "super":
        base, rest = base[:-1], rest[1:]
    return base + rest


def edges_of(root: Path):
    modules = {tuple(module_of(root, f)) for f in root.rglob("*.rs")}
    for file in sorted(root.rglob("*.rs")):
        here = module_of(root, file)
        text = strip(file.read_text())
        targets = []
        for m in GROUP.finditer(text):
            for item in m.group(2).split(","):
                names = [n.strip() for n in item.strip().split("::") if n.strip()]
                if names and names[0].isidentifier():
                    targets.append(resolve(here, False, m.group(1), names))
        for m in PATH.finditer(text):
            targets.append(resolve(here, False, m.group(1), m.group(2).split("::")[1:]))
        for t in targets:
            # Keep the longest prefix that names a module of this crate.
            while t and tuple(t) not in modules:
                t = t[:-1]
            if not t:
                continue
            i = 0
            while i < min(len(here), len(t)) and here[i] == t[i]:
                i += 1
            if i < len(here) and i < len(t):
                parent = "::".join(here[:i]) or "crate"
                yield parent, here[i], t[i], file


def cycles(graph: dict[str, set[str]]):
    seen, stack, found = set(), [], []
    on = set()

    def visit(n):
        seen.add(n)
        stack.append(n)
        on.add(n)
        for m in sorted(graph.get(n, ())):
            if m in on:
                found.append(stack[stack.index(m):] + [m])
            elif m not in seen:
                visit(m)
        stack.pop()
        on.discard(n)

    for n in sorted(graph):
        if n not in seen:
            visit(n)
    return found


def main() -> int:
    bad = 0
    for r in ROOTS:
        root = Path(r)
        graphs: dict[str, dict[str, set[str]]] = {}
        for parent, a, b, _ in edges_of(root):
            graphs.setdefault(parent, {}).setdefault(a, set()).add(b)
        for parent, graph in sorted(graphs.items()):
            for c in cycles(graph):
                bad += 1
                print(f"{root}: module cycle in {parent}: {' -> '.join(c)}")
    if bad:
        print(f"{bad} module cycle(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
