#!/usr/bin/env python3
"""Fails when a source file includes a header from a layer it may not use.

The layers and what each may use mirror the targets' links in
runtime/CMakeLists.txt, actors/CMakeLists.txt and kernels/CMakeLists.txt:
the linker keeps a layer from calling up, this keeps its headers from
including up (a header-only call up would link). A layer may use what the
layers it names may use. docs/architecture.md draws the same picture.

    tests/check_layers.py [SOURCE_ROOT]
"""
import pathlib
import re
import sys

# layer: (its folders, the layers directly below it that it uses)
LAYERS = {
    "kernels": (["kernels/cpu", "kernels/cuda"], []),
    "messages": (["messages"], []),
    "base": (["runtime/base", "runtime/io", "runtime/fault"], ["messages"]),
    "agreement": (["runtime/agreement"], ["base"]),
    "model": (["runtime/model"], ["base", "kernels"]),
    "text": (["runtime/text"], ["model"]),
    "net": (["runtime/net"], ["base"]),
    "rank": (["runtime/rank"], ["text"]),
    "engine": (["runtime/engine"], ["rank", "agreement"]),
    "session": (["runtime/session"], ["engine"]),
    "generate": (["runtime/generate"], ["session"]),
    "serve": (["runtime/serve"], ["generate"]),
    "actors": (["actors"], ["generate", "net"]),
    "public": (["include/accord"], ["serve", "actors"]),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def usable(layer, memo={}):
    """The layers `layer` may include from, itself among them."""
    if layer not in memo:
        found = {layer}
        for below in LAYERS[layer][1]:
            found |= usable(below)
        memo[layer] = found
    return memo[layer]


def layer_of(path):
    """The layer whose folder holds `path` (longest folder first), or None.
    The public face is included as "accord/...", from include/."""
    if path.startswith("accord/"):
        path = "include/" + path
    best = None
    for layer, (folders, _) in LAYERS.items():
        for folder in folders:
            if path.startswith(folder + "/") and (best is None or len(folder) > len(best[1])):
                best = (layer, folder)
    return best[0] if best else None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    violations = []
    checked = 0
    for layer, (folders, _) in LAYERS.items():
        for folder in folders:
            for file in sorted((root / folder).rglob("*")):
                if file.suffix not in (".hpp", ".cpp", ".cu", ".cuh"):
                    continue
                checked += 1
                relative = file.relative_to(root).as_posix()
                for included in INCLUDE.findall(file.read_text()):
                    target = layer_of(included)
                    if target is not None and target not in usable(layer):
                        violations.append(f"{relative}: includes {included} ({layer} may not use {target})")
    for line in violations:
        print(line)
    if checked == 0:
        print(f"no sources found under {root}")
        return 1
    print(f"{checked} files checked, {len(violations)} includes across layers the wrong way")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
