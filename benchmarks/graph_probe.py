"""Whether FRAQ's static pass can run as a CUDA graph, measured on the device.

    python -m benchmarks.graph_probe [--device cuda] [--presets roberta-base,llama-3.2-3b]

A CUDA graph replays a captured sequence of kernels with one launch from the host, which
is what the host-bound static pass needs (docs/performance.md, "Host reads and
launches"); whether its steps capture at all (cuSOLVER's Cholesky and triangular solve,
CuPy's batched eigensolver on torch's stream, workspaces allocated during capture) only a
GPU can say. Per preset, on the first shape group of the whole model (FRAQ's stacks at
tau = 0.95 in CUDA's configuration), three spans of the static pass (:func:`fraq._static.start`) are run
eagerly, then captured with ``torch.cuda.graph`` after warm-up calls on a side stream,
and replayed:

- ``gram``: the basis and the Gram (X^T X in float64, ``cholesky_ex``, the triangular
  inverse, Y Y^T, G = L^T (Y Y^T) L);
- ``eigh``: the eigenproblem of that G on the pass's route (:func:`fraq._eigen.eigh`);
- ``pass``: the whole pass, energy rule, verdicts and the map back at the static width.

Per span: ``captured`` (or ``error``, the exception's text), ``replay_difference`` (the
largest |replay - eager| over the span's outputs, relative to the largest |eager|: 0 for
kernels that are deterministic on the same inputs), and the median eager and replay times
in ms over ``repeats`` calls (CUDA events, each call synchronised). Nothing in the library
reads this: it is the evidence a CUDA-graph option of FRAQ would be built and set from.
On a device without CUDA every preset's record says so and nothing runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch

__all__ = ["group_stacks", "main", "probe", "spans"]


def group_stacks(preset: str, device: torch.device, layers: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact weighted stacks of ``preset``'s first shape group
    (:func:`benchmarks.cases.preset_stacks`), on ``device``."""
    from benchmarks.cases import preset_stacks

    _, B, A = preset_stacks(preset, layers=layers)[0]
    return B.to(device), A.to(device)


def spans(B: torch.Tensor, A: torch.Tensor) -> dict[str, Callable[[], tuple[torch.Tensor, ...]]]:
    """The three spans of the static pass on the stacks B, A (module docstring), each a
    zero-argument call returning its output tensors: FRAQ at tau = 0.95 with the ``cholesky``
    basis and the static pipeline; the Gram span is the pass's own first steps
    (:func:`fraq._static.basis_and_gram`) and the pass is queued by
    :func:`fraq._recompress.start_checked`, which reads nothing on the host (a ValueError
    where the static pass does not apply to the stacks)."""
    from fraq.internals import basis_and_gram, check_options, eigh, orient, start_checked

    options = check_options(tau=0.95, backend="cholesky", pipeline="static")
    X, Y, _ = orient(B.reshape(-1, *B.shape[-2:]), A.reshape(-1, *A.shape[-2:]))

    def gram():
        out = basis_and_gram(X, Y)
        return out.L, out.Linv, out.G

    G = gram()[2]

    def eigen():
        return tuple(eigh(G, torch.float64, "auto", check=False))

    def whole():
        st = start_checked(options, B, A).static
        if st is None:
            raise ValueError(f"the static pass does not apply to stacks of shape {tuple(B.shape)}, {tuple(A.shape)}")
        return (st.packed, *(v for v in st.out.values() if isinstance(v, torch.Tensor)))

    return {"gram": gram, "eigh": eigen, "pass": whole}


def _difference(replayed: tuple[torch.Tensor, ...], eager: tuple[torch.Tensor, ...]) -> float:
    scale = max((float(e.abs().max()) for e in eager if e.numel()), default=0.0) or 1.0
    return max((float((r.double() - e.double()).abs().max()) for r, e in zip(replayed, eager) if e.numel()),
               default=0.0) / scale


def _median_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median of ``repeats`` calls in ms, CUDA events around each (:func:`benchmarks.measure.timed`)."""
    from benchmarks.measure import timed

    return timed(fn, repeats=repeats, warmup=0, device=device).median * 1e3


def _span(fn: Callable[[], tuple[torch.Tensor, ...]], device: torch.device, repeats: int) -> dict:
    """One span eager, captured and replayed (module docstring's fields); an error anywhere
    is the span's record, and the probe goes on."""
    try:
        eager = tuple(t.clone() for t in fn())
        out = {"eager_ms": _median_ms(fn, device, repeats)}
    except Exception as exc:  # noqa: BLE001 - the probe's finding, recorded
        return dict(captured=False, error=f"eager: {type(exc).__name__}: {exc}"[:500], eager_ms=float("nan"))
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture asks
            for _ in range(3):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fn()
        graph.replay()
        torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - the probe's finding, recorded
        torch.cuda.synchronize(device)
        return dict(out, captured=False, error=f"{type(exc).__name__}: {exc}"[:500])
    out.update(captured=True, replay_difference=_difference(captured, eager),
               replay_ms=_median_ms(graph.replay, device, repeats))
    return out


def probe(presets: list[str], device: torch.device | str = "cuda", repeats: int = 15, layers: int | None = None
          ) -> list[dict]:
    """Per preset, its first shape group's shapes and each span's record (module docstring)."""
    device = torch.device(device)
    out = []
    for name in presets:
        if device.type != "cuda":
            out.append({"preset": name, "skipped": f"CUDA graphs need a CUDA device, not {device}"})
            continue
        rec = {"preset": name, "spans": {}}
        try:
            B, A = group_stacks(name, device, layers)
            rec["stacks"] = [list(B.shape), list(A.shape)]
            calls = spans(B, A)
        except Exception as exc:  # noqa: BLE001 - the probe's finding, recorded
            rec["skipped"] = f"{type(exc).__name__}: {exc}"[:500]
            out.append(rec)
            continue
        for span, fn in calls.items():
            rec["spans"][span] = _span(fn, device, repeats)
        out.append(rec)
    return out


def lines(records: list[dict]) -> list[str]:
    """The records as summary lines."""
    out = []
    for rec in records:
        if "spans" not in rec or not rec["spans"]:
            out.append(f"- {rec['preset']}: {rec.get('skipped', 'no record')}")
            continue
        for span, r in rec["spans"].items():
            if r["captured"]:
                out.append(f"- {rec['preset']} `{span}`: captured; replay {r['replay_ms']:.3g} ms against eager "
                           f"{r['eager_ms']:.3g} ms, largest difference {r['replay_difference']:.1e}")
            else:
                out.append(f"- {rec['preset']} `{span}`: not captured ({r['error']}); eager {r['eager_ms']:.3g} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks.device import checked_or_said

    ap = argparse.ArgumentParser(prog="python -m benchmarks.graph_probe", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--presets", default="roberta-base,llama-3.2-3b", help="comma-separated presets")
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per span (default 15)")
    args = ap.parse_args(argv)
    device = checked_or_said(args.device)
    if device is None:
        return 2
    records = probe([p.strip() for p in args.presets.split(",") if p.strip()], device, args.repeats)
    print(json.dumps(records, indent=1, allow_nan=False))
    print("\n".join(lines(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
