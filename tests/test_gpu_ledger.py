"""The GPU ledger and planner (benchmarks.gpu_check.ledger, benchmarks.gpu_check.plan), on CPU."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu_check import ledger, plan

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
BUDGET = 420.0


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def committed() -> ledger.Ledger:
    return ledger.load()


@pytest.fixture(scope="module")
def fp() -> str:
    return ledger.fingerprint()


def _call(book: ledger.Ledger, kind: str, fp: str, created: str) -> tuple[ledger.Ledger, list]:
    """One call that measures its plan, each item in its expected seconds: the ledger after it."""
    taken, _ = plan.plan(book, kind, fp, BUDGET)
    new = [ledger.Entry(kind, fp, i.experiment, i.key, created, i.seconds, "replay") for i in taken]
    return ledger.Ledger(list(book.entries) + new), taken


def test_committed_archives_are_read(committed):
    kinds = {e.device_kind for e in committed.entries}
    assert {H100, H200} <= kinds
    assert committed.newest_kind() == H200
    timed = [e for e in committed.entries if e.seconds is not None]
    assert timed and all(0 < e.seconds <= ledger.MAX_POINT_S for e in timed)


@pytest.mark.parametrize("kind", [H100, H200])
def test_replay_two_calls(committed, fp, kind):
    """From the committed records' costs: what two 420 s calls complete of P0-P3."""
    everything = [i for i in plan.items(committed, kind) if i.priority <= 3]
    need = {p: sum(i.seconds for i in everything if i.priority == p) for p in range(4)}
    room = BUDGET - plan.STARTUP_S
    book, first = _call(committed, kind, fp, "9999-01-01T00:00:00")
    book, second = _call(book, kind, fp, "9999-01-02T00:00:00")
    for taken in (first, second):
        assert sum(i.seconds for i in taken) <= room
    done = book.measured(kind, fp)
    left = {p: [i for i in everything if i.priority == p and (i.experiment, i.key) not in done] for p in range(4)}
    numbers = {f"P{p}": f"{need[p]:.0f} s, {len(left[p])} left" for p in range(4)}
    print(kind, numbers)
    if sum(need.values()) <= 2 * room:
        assert not any(left.values()), numbers
    else:
        # the recorded costs say P0-P3 do not fit two calls: the clients sweep alone (its 768 x 3072 and
        # LLaMA-shaped points take seconds to minutes each) is more than two calls' room on either kind
        assert need[2] > 2 * room, numbers
        assert any(left.values())
    # what two calls do complete: the headline (P0) and every P0 point that fits one call
    assert not left[0], numbers


def test_ledger_round_trip(tmp_path):
    path = tmp_path / "ledger.json"
    a = ledger.Entry(H100, "f" * 16, "fig3", "r-fraq-batched-d768-r16", "2026-01-01T00:00:00", 1.5, "call",
                     {"modules": 12, "size": "gpu"})
    b = ledger.Entry(H200, "f" * 16, "check", "tests", "2026-01-01T00:00:09", None, "call")
    ledger.write(path, [a])
    ledger.append(path, [b])
    assert ledger.read(path) == [a, b]
    _strict(path.read_text())
    again = ledger.Entry(H100, "f" * 16, "fig3", "r-fraq-batched-d768-r16", "2026-01-02T00:00:00", 2.0, "call")
    ledger.append(path, [again])
    assert ledger.read(path) == [b, again]
    assert not list(tmp_path.glob(".*.tmp"))
    path.write_text("{\"entries\": [{\"device_kind\": 1}]}")
    with pytest.raises(ValueError, match="not a ledger file"):
        ledger.read(path)


def test_committed_ledger_file_is_strict():
    _strict(ledger.LEDGER.read_text())
    ledger.read(ledger.LEDGER)


def test_measured_point_is_not_planned_again(fp):
    empty = ledger.Ledger([])
    book, first = _call(empty, H100, fp, "2026-01-01T00:00:00")
    assert first
    again, _ = plan.plan(book, H100, fp, BUDGET)
    assert not {(i.experiment, i.key) for i in first} & {(i.experiment, i.key) for i in again}
    # another kind measures them (P4 aside) again
    other, _ = plan.plan(book, H200, fp, BUDGET)
    assert {(i.experiment, i.key) for i in first if i.priority != 4} & {(i.experiment, i.key) for i in other}


def test_new_fingerprint_plans_everything_again(fp):
    everything = plan.items(ledger.Ledger([]), H100)
    done = [ledger.Entry(H100, fp, i.experiment, i.key, "2026-01-01T00:00:00", 1.0) for i in everything]
    book = ledger.Ledger(done)
    assert plan.plan(book, H100, fp, 1e9) == ([], [])
    taken, left = plan.plan(book, H100, "0" * 16, 1e9)
    assert not left and {(i.experiment, i.key) for i in taken} == {(i.experiment, i.key) for i in everything}


def test_p4_once_per_fingerprint(fp):
    p4 = [i for i in plan.items(ledger.Ledger([]), H100) if i.priority == 4]
    assert {("check", "tests"), ("check", "asv-quick"), ("check", "pytest-benchmark-quick")} <= \
        {(i.experiment, i.key) for i in p4}
    assert {i.experiment for i in p4} >= {"workspace", "tf32"}
    book = ledger.Ledger([ledger.Entry(H100, fp, i.experiment, i.key, "2026-01-01T00:00:00", 1.0) for i in p4])
    on_h200, _ = plan.plan(book, H200, fp, 1e9)
    assert not [i for i in on_h200 if i.priority == 4]
    new_code, _ = plan.plan(book, H200, "0" * 16, 1e9)
    assert len([i for i in new_code if i.priority == 4]) == len(p4)


def test_priorities_map_the_checks_points():
    """Every point of every experiment the GPU check measures has a priority; P0 is the headline."""
    from benchmarks.experiments import get
    from benchmarks.gpu_check import PARTS

    for part in PARTS:
        for exp in part.experiments:
            for config in get(exp).points("gpu"):
                assert plan.priority(exp, config) is not None, (exp, config)
    head = [c for c in get("tables123").points("gpu") if plan.priority("tables123", c) == 0]
    assert {c["preset"] for c in head} == {"roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero"}
    for c in head:
        assert "flora" in c["methods"] and "fraq:tau=0.8" in c["methods"] and "fraq:tau=0.95" in c["methods"]
        assert "florist:tau=0.95,kernel=qr" in c["methods"]


def test_budget_cuts_the_plan(fp):
    taken, left = plan.plan(ledger.Ledger([]), H100, fp, 60.0)
    assert sum(i.seconds for i in taken) <= 60.0 - plan.STARTUP_S
    assert left
    prios = [i.priority for i in plan.items(ledger.Ledger([]), H100)]
    assert prios == sorted(prios)


def test_plan_command(capsys):
    from benchmarks.gpu_check.__main__ import main

    assert main(["--plan", "--device", "cuda", "--budget-s", "120", "--device-kind", H200]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"plan for {H200}") and "total" in out and "P0  tables123/roberta-base" in out
    assert main(["--plan", "--budget-s", "nan"]) == 2
