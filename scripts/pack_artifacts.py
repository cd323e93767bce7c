"""Pack folders of artifacts into the pack form (schema 1.7), or unpack them.

    python scripts/pack_artifacts.py pack artifacts/sm90 [FOLDER ...]
    python scripts/pack_artifacts.py unpack artifacts/sm90 --out DIR

``pack`` rewrites each folder in place: its single artifacts and the rows of its packs
become one pack per kernel, device, key axes and selection rule plus its measurements
file, each row checked to read back as the artifact it came from before anything is
written (flyconfigs.publish.packing).  ``unpack`` writes every packed row out as its
1.x artifact file.  Exit 0 on success, 1 with one line on stderr naming the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flyconfigs.errors import FlyconfigsError
from flyconfigs.publish.packing import pack_folder, unpack_folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="pack folders in place")
    pack.add_argument("folders", nargs="+", type=Path)
    unpack = sub.add_parser("unpack", help="write a folder's packed rows out as 1.x artifacts")
    unpack.add_argument("folder", type=Path)
    unpack.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "unpack":
            written = unpack_folder(args.folder, args.out)
            print(f"{args.folder}: {len(written)} artifacts written to {args.out}")
            return 0
        for folder in args.folders:
            result = pack_folder(folder)
            print(f"{folder}: {result.rows} rows, {result.candidates} candidates in {len(result.written)} packs; "
                  f"{len(result.removed)} files replaced, {len(result.single)} left single")
    except FlyconfigsError as exc:
        print(f"pack_artifacts: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
