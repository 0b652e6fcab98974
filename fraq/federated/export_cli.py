"""``python -m fraq.federated.export FILE OUT_DIR``: the command line of :func:`fraq.federated.export.export_peft`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fraq._files import leftovers_as_lines
from fraq.cli import cli_words
from fraq.federated.export import export_peft

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m fraq.federated.export FILE OUT_DIR``: see :func:`export_peft`."""
    p = argparse.ArgumentParser(prog="python -m fraq.federated.export",
                                description="Write a saved round's client adapters as peft adapter directories "
                                            "OUT_DIR/client{k}.")
    p.add_argument("file", help="a client-adapter .safetensors file of the harness")
    p.add_argument("out_dir", help="the directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in OUT_DIR")
    p.add_argument("--allow-later-round", action="store_true",
                   help="export a round T > 1 (adapters relative to W_(T-1) for FLoRA, FRAQ, FedEx-LoRA)")
    p.add_argument("--base-model", help="base_model_name_or_path to write (default: the harness's model)")
    args = p.parse_args(argv)
    try:
        with leftovers_as_lines("python -m fraq.federated.export"):
            dirs = export_peft(args.file, args.out_dir, overwrite=args.overwrite,
                               allow_later_round=args.allow_later_round, base_model=args.base_model)
    except (FileNotFoundError, ImportError, ValueError) as err:
        print(f"error: {cli_words(err)}", file=sys.stderr)
        return 2
    except OSError as err:  # a failure while writing: the earlier export, if any, is left whole
        print(f"error: {cli_words(err)}", file=sys.stderr)
        return 1
    weights = json.loads((Path(args.out_dir) / "export.json").read_text())["weights"]
    print(f"wrote {len(dirs)} peft adapters to {args.out_dir}/ (data weights in export.json); aggregate with\n"
          f"  fraq aggregate {' '.join(map(str, dirs))} --weights {' '.join(f'{w:g}' for w in weights)} "
          f"--tau 0.95 --report -o MERGED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
