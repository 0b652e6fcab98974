"""Every kind of adapter peft writes, merged exactly or refused: round-trip properties against peft's own code.

Each kind is three client adapters that peft itself writes (``get_peft_model`` ...
``save_pretrained``) for a tiny generated model, with every trainable tensor random (LoRA
factors, ``modules_to_save`` heads, ``lora_only`` biases). The reference is peft's, never
fraq's: a client's effective model is peft's own ``merge_and_unload`` of it in float64
(``get_delta_weight``, or BD-LoRA's variant merge, added to the base weights; heads and
biases replaced), and the exact merge of weights a_k is :math:`\\sum_k a_k` of those
state dicts (the LoRA updates summed, the heads and biases averaged: FedAvg).

Properties, per kind: one client merged is that client; K identical clients are that
client; the clients in another order (weights permuted with them) give the same merge;
the merged adapter loads in peft from another working directory and both its effective
weights and its forward pass equal the exact merge; the delta file (kinds without heads)
added to the base weights is the exact merge. Tolerances: float32 output, so
``EPS32`` times a stated factor relative to the update (or the output) they bound.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

from fraq.peft import aggregate_adapters  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps
WEIGHTS = [1.0, 3.0, 2.0]

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]


def bert(cls=transformers.BertModel, **kw):
    cfg = transformers.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=37, max_position_embeddings=16, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, num_labels=3)
    return cls(cfg, **kw)


def gpt2(cls=transformers.GPT2Model):
    cfg = transformers.GPT2Config(n_embd=24, n_layer=2, n_head=2, vocab_size=40, n_positions=16, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                                  num_labels=3)
    return cls(cfg)


BD = dict(target_modules_bd_a=["value"], target_modules_bd_b=["query"], nblocks=2, match_strict=True)
KINDS = {
    # name: (base builder, target modules, the three clients' LoraConfig options)
    "bert-linear": (lambda: bert(add_pooling_layer=False), ["query", "key", "value", "dense"],
                    [dict(r=4, lora_alpha=8), dict(r=6, lora_alpha=5, use_rslora=True),
                     dict(r=2, lora_alpha=4, rank_pattern={"layer.1.attention.self.query": 5, "output.dense": 3},
                          alpha_pattern={"value": 3})]),
    # Conv1D layers and a Linear head: peft saves fan_in_fan_out once (the last value set, False)
    "gpt2-conv1d-linear-head": (lambda: gpt2(transformers.GPT2ForSequenceClassification),
                                ["c_attn", "c_proj", "c_fc", "score"],
                                [dict(r=3, lora_alpha=6), dict(r=5, lora_alpha=4, use_rslora=True),
                                 dict(r=2, lora_alpha=2)]),
    "gpt2-conv1d-embedding": (gpt2, ["c_attn", "c_proj", "wte"],
                              [dict(r=3, lora_alpha=6, fan_in_fan_out=True),
                               dict(r=4, lora_alpha=3, fan_in_fan_out=True, rank_pattern={"wte": 2}),
                               dict(r=2, lora_alpha=2, fan_in_fan_out=True, use_rslora=True)]),
    "bert-embedding": (lambda: bert(add_pooling_layer=False), ["word_embeddings", "query"],
                       [dict(r=3, lora_alpha=6), dict(r=2, lora_alpha=2, use_rslora=True), dict(r=4, lora_alpha=1)]),
    "bert-bdlora": (lambda: bert(add_pooling_layer=False), ["query", "value"],
                    [dict(r=4, lora_alpha=8, use_bdlora=BD), dict(r=2, lora_alpha=3, use_bdlora=BD),
                     dict(r=6, lora_alpha=6, use_bdlora=BD, use_rslora=True)]),
    "bert-heads-biases": (lambda: bert(transformers.BertForSequenceClassification), ["query", "value"],
                          [dict(r=4, lora_alpha=8, modules_to_save=["classifier"], bias="lora_only"),
                           dict(r=3, lora_alpha=3, modules_to_save=["classifier"], bias="lora_only"),
                           dict(r=2, lora_alpha=5, modules_to_save=["classifier"], bias="lora_only")]),
    "bert-gaussian-bf16": (lambda: bert(add_pooling_layer=False).to(torch.bfloat16), ["query", "value"],
                           [dict(r=4, lora_alpha=8, init_lora_weights="gaussian"),
                            dict(r=2, lora_alpha=2, init_lora_weights="gaussian"),
                            dict(r=3, lora_alpha=6, init_lora_weights="gaussian")]),
}


def _quiet():
    hf = transformers.utils.logging
    hf.set_verbosity_error()
    hf.disable_progress_bar()


def make_kind(root: Path, name: str) -> tuple[list[Path], object]:
    """Three client adapters of kind ``name`` under ``root`` (base model saved to root/base)."""
    _quiet()
    build, targets, configs = KINDS[name]
    g = torch.Generator().manual_seed(len(name))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        base = build().eval()
    base.save_pretrained(root / "base")
    dirs = []
    for k, kw in enumerate(configs):
        model = peft.get_peft_model(_load_base(root, name), peft.LoraConfig(target_modules=targets, **kw))
        model.peft_config["default"].base_model_name_or_path = str(root / "base")
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:  # LoRA factors, modules_to_save heads, lora_only biases
                    p.copy_((torch.randn(p.shape, generator=g) * 0.2).to(p.dtype))
        model.save_pretrained(root / f"client{k}")
        dirs.append(root / f"client{k}")
    return dirs


def _load_base(root: Path, name: str):
    """A fresh copy of the base model saved to root/base (built as it was: same seed and options)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return KINDS[name][0]().eval()


def effective(root: Path, name: str, adapter: Path) -> dict[str, torch.Tensor]:
    """The model ``adapter`` makes, by peft's own merge in float64: state dict of merge_and_unload."""
    model = peft.PeftModel.from_pretrained(_load_base(root, name).double(), adapter).double()
    return {k: v.double() for k, v in model.merge_and_unload().state_dict().items()}


def exact(root: Path, name: str, dirs, weights) -> dict[str, torch.Tensor]:
    """sum_k a_k (client k's effective state dict), float64."""
    a = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    states = [effective(root, name, d) for d in dirs]
    return {k: sum(ak * s[k] for ak, s in zip(a, states)) for k in states[0]}


def assert_same_model(got: dict, want: dict, base: dict, factor: float = 64) -> None:
    """Every tensor equal to ``factor`` eps32 of its change from the base (plus eps32 of the base)."""
    assert set(got) == set(want)
    for k in want:
        change = float(torch.linalg.vector_norm(want[k] - base[k]))
        err = float(torch.linalg.vector_norm(got[k].double() - want[k]))
        assert err <= factor * EPS32 * change + 4 * EPS32 * float(torch.linalg.vector_norm(base[k])), (k, err, change)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (name, root, client dirs, base state dict in float64), each kind built once."""
    cache = {}

    def get(name):
        if name not in cache:
            root = tmp_path_factory.mktemp(name)
            dirs = make_kind(root, name)
            base = {k: v.double() for k, v in _load_base(root, name).state_dict().items()}
            cache[name] = (name, root, dirs, base)
        return cache[name]

    return get


@pytest.fixture(params=sorted(KINDS))
def kind(request, built):
    return built(request.param)


def test_one_client_merged_is_that_client(kind, tmp_path):
    name, root, dirs, base = kind
    aggregate_adapters(dirs[1:2], tmp_path / "one", tau=1.0)
    assert_same_model(effective(root, name, tmp_path / "one"), effective(root, name, dirs[1]), base)


def test_identical_clients_are_that_client(kind, tmp_path):
    name, root, dirs, base = kind
    copies = [shutil.copytree(dirs[2], tmp_path / f"copy{k}") for k in range(3)]
    aggregate_adapters(copies, tmp_path / "same", weights=WEIGHTS, tau=1.0)
    assert_same_model(effective(root, name, tmp_path / "same"), effective(root, name, dirs[2]), base)


def test_order_does_not_matter_and_loads_anywhere_with_the_exact_forward(kind, tmp_path, monkeypatch):
    name, root, dirs, base = kind
    want = exact(root, name, dirs, WEIGHTS)
    aggregate_adapters(dirs, tmp_path / "merged", weights=WEIGHTS, tau=1.0)
    order = [2, 0, 1]
    aggregate_adapters([dirs[i] for i in order], tmp_path / "permuted", weights=[WEIGHTS[i] for i in order], tau=1.0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the merged adapter names its base by an absolute path
    for out in ("merged", "permuted"):
        assert_same_model(effective(root, name, tmp_path / out), want, base)
    model = peft.PeftModel.from_pretrained(_load_base(root, name).float(), tmp_path / "merged").eval()
    reference = _load_base(root, name).double().eval()
    reference.load_state_dict(want)
    ids = torch.randint(1, 40, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y, y0 = _output(model(input_ids=ids)), _output(reference(input_ids=ids))
    assert float((y.double() - y0).abs().max()) <= 1e3 * EPS32 * float(y0.abs().max())


def _output(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def test_delta_file_is_the_exact_merge_in_each_modules_layout(kind, tmp_path):
    name, root, dirs, base = kind
    if name == "bert-heads-biases":
        with pytest.raises(ValueError, match="modules_to_save tensors .* are full weights"):
            aggregate_adapters(dirs, tmp_path / "d.safetensors", delta=True)
        return
    want = exact(root, name, dirs, WEIGHTS)
    aggregate_adapters(dirs, tmp_path / "d.safetensors", weights=WEIGHTS, tau=1.0, delta=True, dtype=torch.float64)
    delta = load_file(tmp_path / "d.safetensors")
    # sum_k a_k W rounds W by an ulp or so: a tensor no client changes differs from the base by rounding only
    changed = {k for k in want if float((want[k] - base[k]).abs().max()) > 1e3 * EPS64 * float(base[k].abs().max())}
    assert set(delta) == changed
    got = {k: base[k] + delta[k] if k in delta else base[k] for k in base}
    assert_same_model(got, want, base, factor=16)


# --- refused: anything that changes what B @ A means, or that fraq does not know ----------------

REFUSED = {
    "lora_ga": ({"init_lora_weights": "lora_ga", "lora_ga_config": {"direction": "ArB2r"}}, "rewrites the base"),
    "pissa": ({"init_lora_weights": "pissa_niter_4"}, "rewrites the base"),
    "unknown init": ({"init_lora_weights": "sparkle"}, "init_lora_weights='sparkle' is not an initialization"),
    "unknown option": ({"use_sparkle": {"strength": 2}}, "use_sparkle=.* fraq does not know"),
    "qalora": ({"use_qalora": True}, "use_qalora=True is not supported"),
    "alora": ({"alora_invocation_tokens": [5, 6]}, "alora_invocation_tokens=.*not supported"),
    "kasa": ({"kasa_config": {"rank": 2}}, "kasa_config=.*not supported"),
    "bdlora unknown field": ({"use_bdlora": {**BD, "diagonal_only": True}}, "not a BD-LoRA config fraq knows"),
    "bias": ({"bias": "some"}, "bias\\(='some'\\)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unknown_or_base_rewriting_options_are_refused(built, tmp_path, case):
    _, _, dirs, _ = built("bert-linear")
    edit, match = REFUSED[case]
    bad = shutil.copytree(dirs[0], tmp_path / "bad")
    cfg = json.loads((bad / "adapter_config.json").read_text())
    cfg.update(edit)
    (bad / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"{bad / 'adapter_config.json'}: .*{match}"):
        aggregate_adapters([bad, dirs[1]], None)


def test_bdlora_blocks_that_do_not_split_are_refused(built, tmp_path):
    _, _, dirs, _ = built("bert-bdlora")
    bad = shutil.copytree(dirs[0], tmp_path / "bad")
    cfg = json.loads((bad / "adapter_config.json").read_text())
    cfg["use_bdlora"] = {**BD, "nblocks": 3}
    (bad / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"BD-LoRA lora_[AB] .* does not split into nblocks=3"):
        aggregate_adapters([bad, dirs[1]], None)


def test_delta_layout_needs_the_base_model(built, tmp_path):
    """Without a readable base model, a delta is refused before any work, naming the file and how to fix it."""
    _, _, dirs, _ = built("gpt2-conv1d-linear-head")
    with pytest.raises(ValueError, match=r"cannot be read.*pass the base model's directory \(base=\.\.\., --base DIR\)"):
        aggregate_adapters(dirs, tmp_path / "d.safetensors", delta=True, base=tmp_path / "nowhere")
    assert not (tmp_path / "d.safetensors").exists()
    with pytest.raises(ValueError, match=r"module 'transformer.h.0.mlp.c_fc''s update is \(out, in\)=\(96, 24\).* is not of this base"):
        other = transformers.GPT2Config(n_embd=24, n_layer=2, n_head=2, vocab_size=40, n_positions=16,
                                        n_inner=40, num_labels=3)
        transformers.GPT2ForSequenceClassification(other).save_pretrained(tmp_path / "other")
        aggregate_adapters(dirs, tmp_path / "d.safetensors", delta=True, base=tmp_path / "other")


def test_cli_delta_takes_the_base_and_refuses_in_one_line(built, tmp_path, capsys):
    """``--base DIR`` gives the layouts; a base that cannot be read is one line, exit 2, nothing written."""
    from fraq import cli

    _, root, dirs, base = built("gpt2-conv1d-linear-head")
    out = tmp_path / "d.safetensors"
    assert cli.main(["aggregate", *map(str, dirs), "--delta", "-o", str(out), "--base", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fraq aggregate: error: ") and err.count("\n") == 1 and "--base DIR" in err
    assert not out.exists()
    assert cli.main(["aggregate", *map(str, dirs), "--delta", "-o", str(out), "--base", str(root / "base"),
                     "--tau", "1"]) == 0
    delta = load_file(out)
    assert delta["transformer.h.0.attn.c_proj.weight"].shape == base["transformer.h.0.attn.c_proj.weight"].shape
