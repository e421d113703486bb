"""Program identity (issue 23): recompile every case of ``tests/support/program_identity.py``
(conv / dense / pooling lowerings on every config family the tests use, the former
switch variants, row bands, ResNet-18 / MobileNet-v1 layer tables, whole models) and
compare the SHA-256 of each instruction stream, micro-op kernel set, constant and layout
with the recorded ones (``tests/compiler/program_identity.json``).

Prints one line per differing case and a total; exits 1 on any difference.

Run: ``python bench/program_identity.py [--record] [--cheap] [NAME-PREFIX ...]``
(``--record`` rewrites the JSON from this tree's lowering instead of checking).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import program_identity as pi  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true",
                    help="rewrite the JSON from this tree's lowering instead of checking")
    ap.add_argument("--cheap", action="store_true", help="only the cheap cases")
    ap.add_argument("prefixes", nargs="*", metavar="NAME-PREFIX", help="cases to run")
    args = ap.parse_args(argv)
    record, cheap, prefixes = args.record, args.cheap, args.prefixes
    want = {} if record or not pi.JSON_PATH.exists() else pi.load()
    got, bad, n_prog = {}, [], 0
    t0 = time.perf_counter()
    for case in pi.cases():
        if cheap and not case.cheap:
            continue
        if prefixes and not any(case.name.startswith(p) for p in prefixes):
            continue
        t = time.perf_counter()
        h = pi.hashes_of(case)
        got[case.name] = h
        n_prog += (sum(len(v) if isinstance(v, list) else 1 for v in h.values())
                   if isinstance(h, dict) else len(h) if isinstance(h, list) else 1)
        if not record and want.get(case.name) != h:
            bad.append(case.name)
            print(f"DIFFERS {case.name}", flush=True)
        dt = time.perf_counter() - t
        if dt > 5:
            print(f"  ({case.name}: {dt:.1f} s)", flush=True)
    if record:
        old = {} if not pi.JSON_PATH.exists() else pi.load()
        old.update(got)
        pi.JSON_PATH.write_text(json.dumps(old, indent=0, sort_keys=True) + "\n")
        print(f"recorded {len(got)} cases ({n_prog} programs) to {pi.JSON_PATH}")
        return 0
    print(f"{len(got)} cases, {n_prog} programs hashed in {time.perf_counter() - t0:.0f} s: "
          f"{len(got) - len(bad)} identical, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
