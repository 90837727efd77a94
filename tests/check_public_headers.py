#!/usr/bin/env python3
"""Checks accord's public face, include/accord/*.hpp: each header compiles
on its own, and nothing it includes, however deep, is a kernel, the
agreement machines, the engine or CAF. Only accord/actors.hpp, the opt-in
header for services that embed their own CAF actor system, may include
CAF (and the actors' typed interfaces). The examples, written as a
service would write them, include accord's headers from include/accord
only.

    tests/check_public_headers.py CXX SOURCE_ROOT
"""
import pathlib
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from check_layers import INCLUDE  # noqa: E402

FORBIDDEN = ("kernels/", "runtime/agreement/", "runtime/engine/", "caf/", "actors/interfaces.hpp")
ALLOWED_IN = {"actors.hpp": ("caf/", "actors/interfaces.hpp")}


def dependencies(cxx, root, header):
    """The headers `header` includes, however deep, as the compiler finds them."""
    command = [cxx, "-std=c++20", "-M", "-I", str(root), "-I", str(root / "include"), "-x", "c++", str(header)]
    made = subprocess.run(command, capture_output=True, text=True)
    if made.returncode != 0:
        return None, made.stderr
    words = made.stdout.replace("\\\n", " ").split()[1:]
    return [pathlib.Path(word).resolve() for word in words], ""


def relative(path, root):
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()  # a system header: CAF's are under caf/


def main():
    cxx, root = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
    headers = sorted((root / "include" / "accord").glob("*.hpp"))
    failures = []
    for header in headers:
        deps, error = dependencies(cxx, root, header)
        if deps is None:
            failures.append(f"{header.name}: does not compile on its own:\n{error}")
            continue
        allowed = ALLOWED_IN.get(header.name, ())
        for dep in deps:
            name = relative(dep, root)
            for forbidden in FORBIDDEN:
                inside = name.startswith(forbidden) or f"/{forbidden}" in name
                if inside and not any(name.startswith(a) or f"/{a}" in name for a in allowed):
                    failures.append(f"{header.name}: includes {name}")
    for example in sorted((root / "examples").rglob("*.cpp")):
        for included in INCLUDE.findall(example.read_text()):
            if not included.startswith("accord/"):
                failures.append(f"{example.relative_to(root)}: includes {included}, not a public header")
    for line in failures:
        print(line)
    if not headers:
        print(f"no public headers under {root}/include/accord")
        return 1
    print(f"{len(headers)} public headers checked, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
