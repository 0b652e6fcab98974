"""benchmarks.graph_probe on the CPU: the spans it captures on a GPU compute what the static
pass computes (checked against float64 linear algebra here), and without CUDA it says so
and runs nothing. Bounds: X^T X = L L^T and L^{-1} L = I to 64 r eps64 of their sizes
(a Cholesky factorization and a triangular inverse of a well-conditioned r x r matrix in
float64); the eigenvalues of G to 64 r eps64 of its largest (torch's float64 eigvalsh)."""

from __future__ import annotations

import torch

from benchmarks import graph_probe

EPS64 = torch.finfo(torch.float64).eps


def test_the_spans_compute_the_static_pass_on_the_cpu():
    B, A = graph_probe.group_stacks("roberta-base", torch.device("cpu"), layers=1)
    calls = graph_probe.spans(B, A)
    assert list(calls) == ["gram", "eigh", "pass"]
    L, Linv, G = calls["gram"]()
    r = L.shape[-1]
    X = B.double() if B.shape[-2] <= A.shape[-1] else A.mT.double()
    W = X.mT @ X
    assert float((L @ L.mT - W).abs().max()) <= 64 * r * EPS64 * float(W.abs().max())
    eye = torch.eye(r, dtype=torch.float64)
    assert float((Linv @ L - eye).abs().max()) <= 1e3 * r * EPS64
    lam, _ = calls["eigh"]()
    ref = torch.linalg.eigvalsh(G)
    assert float((lam - ref).abs().max()) <= 64 * r * EPS64 * float(ref.abs().max())
    packed = calls["pass"]()[0]
    import fraq

    res = fraq.recompress(B, A, tau=0.95, backend="cholesky", pipeline="static")
    assert packed[:, 2].long().tolist() == res.rank_list()


def test_without_cuda_nothing_runs():
    records = graph_probe.probe(["roberta-base"], "cpu")
    assert records == [{"preset": "roberta-base", "skipped": "CUDA graphs need a CUDA device, not cpu"}]
    assert graph_probe.lines(records) == ["- roberta-base: CUDA graphs need a CUDA device, not cpu"]


def test_the_lines_say_what_captured_and_what_did_not():
    records = [{"preset": "p", "spans": {
        "gram": dict(captured=True, replay_difference=0.0, replay_ms=0.1, eager_ms=0.5),
        "eigh": dict(captured=False, error="RuntimeError: operation not permitted when stream is capturing",
                     eager_ms=1.0)}}]
    out = graph_probe.lines(records)
    assert out[0].startswith("- p `gram`: captured; replay 0.1 ms against eager 0.5 ms")
    assert "not captured (RuntimeError: operation not permitted" in out[1]


def test_the_gpu_checks_summary_shows_the_probe_and_the_pipelines(tmp_path):
    """The summary reads the ``pipeline`` and ``cuda_graphs`` result files: each method's row in
    the compared order, whether a FRAQ pipeline's ranks are the stepwise one's, and the probe."""
    import json

    from benchmarks.gpu_check.summary import _pipeline

    def write(experiment, key, config, result):
        path = tmp_path / "results" / experiment / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"config": config, "result": result}))

    compared = ["stepwise", "static-call", "flora"]
    rows = [("static-call", "fraq:tau=0.95,pipeline=static,reads=call", [3, 5]), ("flora", "flora", [8, 8]),
            ("stepwise", "fraq:tau=0.95,pipeline=stepwise", [3, 4])]
    for row, spec, ranks in rows:
        write("pipeline", f"p-{row}", dict(preset="p", row=row, method=spec, compared=compared),
              dict(timing={"median": 1e-3}, ranks=ranks, modules=2, syncs=1, kernels=10, device_busy_s=5e-4))
    write("cuda_graphs", "p", {"preset": "p"},
          {"spans": {"pass": dict(captured=True, replay_difference=0.0, replay_ms=0.2, eager_ms=3.0)}})
    text = "\n".join(_pipeline(tmp_path))
    table = [line for line in text.splitlines() if line.startswith("| p (2) |")]
    assert [line.split(" | ")[1] for line in table] == [spec for _, spec, _ in sorted(rows, key=lambda r: compared.index(r[0]))]
    assert table[0].endswith("| yes |") and table[1].endswith("| NO |") and table[2].endswith("| - |")
    assert "CUDA graphs of the static pass" in text and "- p `pass`: captured; replay 0.2 ms" in text
