"""fraq.peft and ``fraq aggregate``: real peft adapters of tiny generated models.

References are computed in float64 from the tensors and scales peft itself holds (its live
layers' ``scaling``), never through the module's own scale logic. Tolerances are
``torch.finfo(dtype).eps`` times a stated factor.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

from fraq import cli  # noqa: E402
from fraq.peft import (  # noqa: E402
    PREFIX,
    aggregate_adapters,
    exact_key,
    pattern_key,
    read_adapter,
)

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps

BERT_CLIENTS = [
    dict(r=4, lora_alpha=8),
    dict(r=6, lora_alpha=5, use_rslora=True),
    dict(r=2, lora_alpha=4, rank_pattern={"layer.1.attention.self.query": 5, "output.dense": 3},
         alpha_pattern={"value": 3, "layer.0.attention.self.query": 7}),
]
WEIGHTS = [1.0, 3.0, 2.0]


# transformers 5.23 deprecates a method peft 0.21.2 still calls; peft warns about fan_in_fan_out defaults.
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module", autouse=True)
def _quiet():
    """No load reports or progress bars from the tiny models; restored afterwards."""
    hf = transformers.utils.logging
    verbosity, bars = hf.get_verbosity(), hf.is_progress_bar_enabled()
    hf.set_verbosity_error()
    hf.disable_progress_bar()
    yield
    hf.set_verbosity(verbosity)
    if bars:
        hf.enable_progress_bar()


def tiny_bert(seed: int = 0, dtype=torch.float32):
    cfg = transformers.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=37, max_position_embeddings=16, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.BertModel(cfg, add_pooling_layer=False).to(dtype).eval()


def tiny_gpt2(seed: int = 0):
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=40, n_positions=16, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.GPT2Model(cfg).eval()


def lora_layers(model):
    """module name (relative to the base model) -> peft LoRA layer."""
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in model.base_model.model.named_modules() if isinstance(m, LoraLayer)}


def factors(layer, adapter="default"):
    if adapter in layer.lora_A:
        return layer.lora_B[adapter].weight, layer.lora_A[adapter].weight
    return layer.lora_embedding_B[adapter], layer.lora_embedding_A[adapter]


def make_clients(root, base_fn, configs, targets, seed):
    """Save peft adapters with random nonzero factors, of the base model saved to root/base (which
    they record); return (dirs, per client module -> (B, A, scaling))."""
    dirs, refs = [], []
    g = torch.Generator().manual_seed(seed)
    base_fn().save_pretrained(root / "base")
    for k, kw in enumerate(configs):
        model = peft.get_peft_model(base_fn(), peft.LoraConfig(target_modules=targets, **kw))
        model.peft_config["default"].base_model_name_or_path = str(root / "base")
        ref = {}
        with torch.no_grad():
            for name, layer in lora_layers(model).items():
                B, A = factors(layer)
                B.copy_(torch.randn(B.shape, generator=g) * 0.3 * 0.7 ** torch.arange(B.shape[1]))
                A.copy_(torch.randn(A.shape, generator=g) / math.sqrt(A.shape[1]))
                ref[name] = (B.double().clone(), A.double().clone(), layer.scaling["default"])
        path = root / f"client{k}"
        model.save_pretrained(path)
        dirs.append(path)
        refs.append(ref)
    return dirs, refs


def exact(refs, weights, module):
    """Delta = sum_k a_k s_k B_k A_k in float64, (m, n), from peft's own tensors and scalings."""
    a = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    return sum(ak * s * (B @ A) for ak, (B, A, s) in zip(a, (r[module] for r in refs)))


def rel(X, Y):
    return float(torch.linalg.matrix_norm(X.double() - Y.double()) / torch.linalg.matrix_norm(Y.double()))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    dirs, refs = make_clients(root, tiny_bert, BERT_CLIENTS, ["query", "value", "dense"], seed=1)
    return dirs, refs


def copy_client(src, dst, *, config=None, tensors=None):
    """A copy of an adapter dir with its config dict and/or tensor dict edited by callables."""
    shutil.copytree(src, dst)
    if config is not None:
        cfg = json.loads((dst / "adapter_config.json").read_text())
        config(cfg)
        (dst / "adapter_config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        t = load_file(dst / "adapter_model.safetensors")
        tensors(t)
        save_file(t, dst / "adapter_model.safetensors")
    return dst


# --- pattern matching -------------------------------------------------------------------------

@pytest.mark.parametrize("module", ["encoder.layer.1.attention.self.query", "encoder.layer.10.attention.self.query",
                                    "encoder.layer.0.output.dense", "encoder.layer.0.attention.output.dense",
                                    "h.1.attn.c_attn"])
def test_pattern_key_is_peft_semantics(module):
    from peft.utils.other import get_pattern_key

    patterns = ["layer.1.attention.self.query", "output.dense", "query", "attn.c_attn", "^h\\.1\\.attn\\.c_attn"]
    got = pattern_key(patterns, module)
    assert (got if got is not None else module) == get_pattern_key(patterns, module)


def test_exact_key_matches_only_its_module():
    names = ["encoder.layer.1.attention.self.query", "encoder.layer.10.attention.self.query",
             "x.encoder.layer.1.attention.self.query", "encoder.layer.1.attention.self.query2"]
    for name in names:
        assert [n for n in names if pattern_key([exact_key(name)], n)] == [name]


def test_read_adapter_scales_match_peft(bert):
    dirs, refs = bert
    for path, ref in zip(dirs, refs):
        c = read_adapter(path)
        assert set(c.factors) == set(ref)
        for m, (B, A, s) in ref.items():
            assert c.scales[m] == pytest.approx(s, rel=4 * EPS64)
            assert torch.equal(c.factors[m][0].double(), B) and torch.equal(c.factors[m][1].double(), A)


# --- exactness at tau = 1 and the energy rule -------------------------------------------------

@pytest.mark.parametrize("compute", [torch.float64, torch.float32])
def test_tau_one_loaded_adapter_reproduces_exact_aggregate(bert, tmp_path, compute):
    dirs, refs = bert
    # the fixture's spectra decay no further than ~0.03 sigma_1, above float32's Gram noise floor
    agg = aggregate_adapters(dirs, tmp_path / "out", weights=WEIGHTS, tau=1.0, compute_dtype=compute)
    model = peft.PeftModel.from_pretrained(tiny_bert(), tmp_path / "out")
    layers = lora_layers(model)
    assert set(layers) == set(refs[0])
    for m, layer in layers.items():
        D = exact(refs, WEIGHTS, m)
        assert layer.scaling["default"] == 1.0
        assert layer.r["default"] == agg.ranks[m]
        # float32 output (and float32 stack + QR when compute is float32): factor 100 on eps32.
        assert rel(layer.get_delta_weight("default"), D) < 100 * EPS32
    # outputs: the loaded adapter equals the base model with Delta added to its weights
    ids = torch.randint(0, 40, (3, 9), generator=torch.Generator().manual_seed(0))
    base = tiny_bert()
    with torch.no_grad():
        for m in layers:
            base.get_submodule(m).weight += exact(refs, WEIGHTS, m).float()
        want = base(input_ids=ids).last_hidden_state
        got = model(input_ids=ids).last_hidden_state
    # LayerNorm'd outputs of size ~1 after two layers: factor 1000 on float32 eps.
    assert float((got - want).abs().max()) < 1e3 * EPS32


def test_tau_one_float64_is_exact_and_client_order_invariant(bert, tmp_path):
    dirs, refs = bert
    fwd = aggregate_adapters(dirs, None, weights=WEIGHTS, tau=1.0, dtype=torch.float64)
    rev = aggregate_adapters(dirs[::-1], None, weights=WEIGHTS[::-1], tau=1.0, dtype=torch.float64)
    for m, (B, A) in fwd.factors.items():
        D = exact(refs, WEIGHTS, m)
        assert rel(B @ A, D) < 100 * EPS64
        assert rel(rev.factors[m][0] @ rev.factors[m][1], D) < 100 * EPS64
        assert fwd.ranks[m] == rev.ranks[m]


def test_one_client_and_duplicate_clients(bert, tmp_path):
    dirs, refs = bert
    one = aggregate_adapters(dirs[1:2], None, tau=1.0, dtype=torch.float64)
    copies = [shutil.copytree(dirs[1], tmp_path / f"copy{k}") for k in range(3)]  # equal content, distinct dirs
    dup = aggregate_adapters(copies, None, weights=WEIGHTS, tau=1.0, dtype=torch.float64)
    for m, (B, A, s) in refs[1].items():
        assert rel(one.factors[m][0] @ one.factors[m][1], s * B @ A) < 100 * EPS64
        assert rel(dup.factors[m][0] @ dup.factors[m][1], s * B @ A) < 100 * EPS64
        assert one.ranks[m] == dup.ranks[m] == A.shape[0]  # the stack of 3 copies is rank-deficient


@pytest.mark.parametrize("tau", [0.6, 0.9])
def test_tau_below_one_energy_rule_and_eckart_young(bert, tau):
    dirs, refs = bert
    agg = aggregate_adapters(dirs, None, weights=WEIGHTS, tau=tau, dtype=torch.float64)
    for row in agg.rows:
        D = exact(refs, WEIGHTS, row.module)
        S = torch.linalg.svdvals(D)
        cum = torch.cumsum(S**2, 0) / (S**2).sum()
        p = int((cum < tau - 1e-12).sum()) + 1
        assert row.rank == p, row.module
        B, A = agg.factors[row.module]
        err = float(torch.linalg.matrix_norm(B @ A - D))
        opt = float(S[p:].square().sum().sqrt())
        assert err == pytest.approx(opt, abs=100 * EPS64 * float(S[0]))
        # the report's Gram-matrix numbers: energy to ~eps, error to ~sqrt(eps) of ||Delta||
        assert row.energy == pytest.approx(float(cum[p - 1]), abs=1e3 * EPS64)
        assert row.rel_error == pytest.approx(opt / float(S.square().sum().sqrt()), abs=1e3 * math.sqrt(EPS64))


def test_uniform_rank_pads_with_zeros(bert, tmp_path):
    dirs, refs = bert
    agg = aggregate_adapters(dirs, tmp_path / "out", weights=WEIGHTS, tau=0.9, uniform_rank=True)
    plain = aggregate_adapters(dirs, None, weights=WEIGHTS, tau=0.9)
    assert len(set(plain.ranks.values())) > 1 and set(agg.ranks.values()) == {max(plain.ranks.values())}
    cfg = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert cfg["rank_pattern"] == {} == cfg["alpha_pattern"] and cfg["r"] == cfg["lora_alpha"] == max(agg.ranks.values())
    for m, layer in lora_layers(peft.PeftModel.from_pretrained(tiny_bert(), tmp_path / "out")).items():
        B, A = plain.factors[m]
        assert rel(layer.get_delta_weight("default"), B.double() @ A.double()) < 4 * EPS32


def test_fixed_rank_is_a_cap_per_module(bert):
    dirs, _ = bert
    stacked = {m: sum(read_adapter(d).factors[m][1].shape[0] for d in dirs) for m in read_adapter(dirs[0]).factors}
    for rank in (3, 13):
        agg = aggregate_adapters(dirs, None, rank=rank, report=False)
        assert agg.ranks == {m: min(rank, r) for m, r in stacked.items()}
        assert all(row.energy is None for row in agg.rows)


def test_bf16_clients_aggregate_in_float32(bert, tmp_path):
    dirs, refs = bert
    halves = [copy_client(d, tmp_path / f"bf{k}", tensors=lambda t: t.update({n: v.bfloat16() for n, v in t.items()}))
              for k, d in enumerate(dirs)]
    # the reference: the bf16-rounded factors at peft's scalings, exact in float64
    refs = [{m: (B.bfloat16().double(), A.bfloat16().double(), s) for m, (B, A, s) in r.items()} for r in refs]
    agg = aggregate_adapters(halves, None, weights=WEIGHTS, tau=1.0)
    for m, (B, A) in agg.factors.items():
        assert B.dtype == torch.float32
        assert rel(B.double() @ A.double(), exact(refs, WEIGHTS, m)) < 100 * EPS32


# --- parity with peft -------------------------------------------------------------------------

def test_flora_equals_peft_add_weighted_adapter_cat(bert, tmp_path):
    dirs, _ = bert
    agg = aggregate_adapters(dirs, tmp_path / "flora", weights=WEIGHTS, method="flora")
    # peft's cat: lora_A <- cat(w_k * scaling_k * A_k), lora_B <- cat(B_k), new scaling new_r / new_r = 1.
    # The first adapter must not use rsLoRA: peft then gives the merged adapter new_r / sqrt(new_r).
    model = peft.PeftModel.from_pretrained(tiny_bert(), dirs[0], adapter_name="c0")
    for k in (1, 2):
        model.load_adapter(dirs[k], adapter_name=f"c{k}")
    a = [w / sum(WEIGHTS) for w in WEIGHTS]
    model.add_weighted_adapter(["c0", "c1", "c2"], a, "merged", combination_type="cat")
    ours = peft.PeftModel.from_pretrained(tiny_bert(), tmp_path / "flora")
    theirs = lora_layers(model)
    for m, layer in lora_layers(ours).items():
        assert agg.ranks[m] == sum(read_adapter(d).factors[m][1].shape[0] for d in dirs)
        want = theirs[m].get_delta_weight("merged").double()
        assert rel(layer.get_delta_weight("default"), want) < 16 * EPS32


@pytest.mark.parametrize("method", ["florist", "flexlora", "fedit"])
def test_other_methods_write_loadable_adapters(bert, tmp_path, method):
    dirs, refs = bert
    if method == "fedit":  # averages factors: needs equal ranks and scales, so three copies of one client
        dirs = [shutil.copytree(dirs[0], tmp_path / f"copy{k}") for k in range(3)]
        refs = [refs[0]] * 3
    agg = aggregate_adapters(dirs, tmp_path / method, weights=WEIGHTS, method=method)
    model = peft.PeftModel.from_pretrained(tiny_bert(), tmp_path / method)
    for m, layer in lora_layers(model).items():
        B, A = agg.factors[m]
        assert rel(layer.get_delta_weight("default"), B.double() @ A.double()) < 4 * EPS32
        if method == "fedit":  # identical clients: the average is the client
            assert rel(B.double() @ A.double(), exact(refs, WEIGHTS, m)) < 16 * EPS32


def test_fedex_lora_delta_is_exact_and_adapter_refused(bert, tmp_path):
    dirs, refs = bert
    same = [dirs[0], shutil.copytree(dirs[0], tmp_path / "copy")]
    with pytest.raises(ValueError, match="delta"):
        aggregate_adapters(same, tmp_path / "a", method="fedex-lora")
    aggregate_adapters(same, tmp_path / "d.safetensors", weights=[1, 2], method="fedex-lora", delta=True)
    got = load_file(tmp_path / "d.safetensors")
    for m in refs[0]:
        assert rel(got[f"{m}.weight"], exact([refs[0], refs[0]], [1, 2], m)) < 16 * EPS32


@pytest.mark.parametrize("method", ["florg", "lora-a2"])
def test_methods_without_a_lora_form_are_refused(bert, method):
    with pytest.raises(ValueError, match=method):
        aggregate_adapters(bert[0], None, method=method)
    with pytest.raises(ValueError, match=method):
        aggregate_adapters(bert[0], None, method=method, delta=True)


def test_delta_file_is_exact_in_base_layout(bert, tmp_path):
    dirs, refs = bert
    aggregate_adapters(dirs, tmp_path / "delta.safetensors", weights=WEIGHTS, method="flora", delta=True,
                       dtype=torch.float64)
    got = load_file(tmp_path / "delta.safetensors")
    state = tiny_bert().state_dict()
    assert set(got) == {f"{m}.weight" for m in refs[0]}
    for m in refs[0]:
        assert got[f"{m}.weight"].shape == state[f"{m}.weight"].shape
        assert got[f"{m}.weight"].dtype == torch.float64
        assert rel(got[f"{m}.weight"], exact(refs, WEIGHTS, m)) < 16 * EPS64


# --- GPT-2: Conv1D (fan_in_fan_out) and embedding LoRA ----------------------------------------

def test_gpt2_conv1d_and_embedding_layout(tmp_path):
    configs = [dict(r=3, lora_alpha=6, fan_in_fan_out=True), dict(r=5, lora_alpha=4, use_rslora=True,
                                                                  fan_in_fan_out=True)]
    dirs, refs = make_clients(tmp_path, tiny_gpt2, configs, ["c_attn", "c_proj", "c_fc", "wte"], seed=2)
    w = [2.0, 1.0]
    aggregate_adapters(dirs, tmp_path / "out", weights=w, tau=1.0)
    aggregate_adapters(dirs, tmp_path / "delta.safetensors", weights=w, tau=1.0, delta=True)
    delta = load_file(tmp_path / "delta.safetensors")
    base = tiny_gpt2()
    state = base.state_dict()
    assert any("wte" in m for m in refs[0]) and any("c_attn" in m for m in refs[0])
    for m in refs[0]:
        D = exact(refs, w, m)  # (m, n) = (out, in); the stored weight is (in, out) for Conv1D and wte
        assert delta[f"{m}.weight"].shape == state[f"{m}.weight"].shape == D.mT.shape
        assert rel(delta[f"{m}.weight"], D.mT) < 100 * EPS32
    model = peft.PeftModel.from_pretrained(tiny_gpt2(), tmp_path / "out")
    for m, layer in lora_layers(model).items():
        assert rel(layer.get_delta_weight("default"), delta[f"{m}.weight"]) < 16 * EPS32
    ids = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    base.load_state_dict({k: v + delta[k] if k in delta else v for k, v in state.items()})
    with torch.no_grad():
        assert float((model(input_ids=ids).last_hidden_state - base(input_ids=ids).last_hidden_state)
                     .abs().max()) < 1e3 * EPS32


# --- awkward cases ----------------------------------------------------------------------------

def test_zero_module_written_as_rank_one_zero(bert, tmp_path):
    dirs, _ = bert
    zero = "encoder.layer.0.attention.self.value"

    def zero_b(t):
        t[f"{PREFIX}{zero}.lora_B.weight"].zero_()

    copies = [copy_client(d, tmp_path / f"z{k}", tensors=zero_b) for k, d in enumerate(dirs)]
    agg = aggregate_adapters(copies, tmp_path / "out", tau=0.95)
    assert agg.ranks[zero] == 1 and not agg.factors[zero][0].any()
    layer = lora_layers(peft.PeftModel.from_pretrained(tiny_bert(), tmp_path / "out"))[zero]
    assert layer.r["default"] == 1 and not layer.get_delta_weight("default").any()


def test_modules_to_save_are_averaged(bert, tmp_path):
    dirs, _ = bert
    key = f"{PREFIX}classifier.weight"
    copies = [copy_client(d, tmp_path / f"h{k}", tensors=lambda t, k=k: t.update({key: torch.full((2, 32), k + 1.0)}))
              for k, d in enumerate(dirs)]
    agg = aggregate_adapters(copies, tmp_path / "out", weights=WEIGHTS)
    want = sum(w * (k + 1.0) for k, w in enumerate(WEIGHTS)) / sum(WEIGHTS)
    assert torch.allclose(load_file(tmp_path / "out" / "adapter_model.safetensors")[key],
                          torch.full((2, 32), want), rtol=4 * EPS32, atol=0)
    assert key in agg.full
    with pytest.raises(ValueError, match="modules_to_save"):
        aggregate_adapters(copies, tmp_path / "d.safetensors", delta=True)


def _set(key, value):
    return lambda cfg: cfg.__setitem__(key, value)


def _drop(suffix):
    return lambda t: [t.pop(k) for k in [k for k in t if k.endswith(suffix)]]


BAD = {
    "peft_type": (dict(config=_set("peft_type", "IA3")), "peft_type"),
    "dora": (dict(config=_set("use_dora", True)), "use_dora"),
    "pissa": (dict(config=_set("init_lora_weights", "pissa")), "init_lora_weights"),
    "base model": (dict(config=_set("base_model_name_or_path", "other/model")), "base_model_name_or_path"),
    "r mismatch": (dict(config=_set("r", 7)), "rank 4 .* r=7"),
    "a without b": (dict(tensors=_drop("layer.0.attention.self.query.lora_B.weight")),
                    "encoder.layer.0.attention.self.query' has no lora_B"),
    "b without a": (dict(tensors=_drop("layer.1.attention.self.value.lora_A.weight")), "value' has no lora_A"),
    "nan": (dict(tensors=lambda t: t[f"{PREFIX}encoder.layer.1.output.dense.lora_A.weight"].__setitem__(
        (0, 0), float("nan"))), "encoder.layer.1.output.dense'.*NaN"),
    "lora bias": (dict(tensors=lambda t: t.update({f"{PREFIX}encoder.layer.0.attention.self.query.lora_B.bias":
                                                   torch.zeros(32)})), "lora_B.bias"),
    "shape": (dict(tensors=lambda t: t.update({f"{PREFIX}encoder.layer.0.attention.self.value.lora_A.weight":
                                               torch.ones(4, 33)})), "value'.*\\(32, 33\\)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_adapters_name_the_file(bert, tmp_path, case):
    edit, message = BAD[case]
    bad = copy_client(bert[0][0], tmp_path / "bad_client", **edit)
    with pytest.raises(ValueError, match=message) as info:
        aggregate_adapters([bert[0][1], bad], tmp_path / "out")
    assert "bad_client" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_different_modules_and_missing_files(bert, tmp_path):
    dirs, _ = bert
    fewer = copy_client(dirs[1], tmp_path / "fewer", tensors=_drop(".encoder.layer.1.output.dense.lora_A.weight"))
    with pytest.raises(ValueError, match="fewer.*has no lora_A"):
        aggregate_adapters([dirs[0], fewer], None)
    gone = copy_client(dirs[1], tmp_path / "gone")
    t = {k: v for k, v in load_file(gone / "adapter_model.safetensors").items() if ".layer.1.output.dense" not in k}
    save_file(t, gone / "adapter_model.safetensors")
    with pytest.raises(ValueError, match="gone.*different modules.*missing \\['encoder.layer.1.output.dense'\\]"):
        aggregate_adapters([dirs[0], gone], None)
    nocfg = copy_client(dirs[0], tmp_path / "nocfg")
    (nocfg / "adapter_config.json").unlink()
    with pytest.raises(ValueError, match="nocfg/adapter_config.json: missing"):
        aggregate_adapters([dirs[0], nocfg], None)
    pickled = copy_client(dirs[0], tmp_path / "pickled")
    (pickled / "adapter_model.safetensors").rename(pickled / "adapter_model.bin")
    with pytest.raises(ValueError, match="pickled/adapter_model.bin.*safetensors"):
        aggregate_adapters([dirs[0], pickled], None)
    with pytest.raises(ValueError, match="not a directory"):
        aggregate_adapters([dirs[0], tmp_path / "nowhere"], None)


@pytest.mark.parametrize("weights, message", [([1.0, 2.0], "weights has 2 entries"), ([1, -1, 1], "weights\\[1\\]"),
                                              ([1, float("nan"), 1], "weights\\[1\\]"), ([0, 0, 0], "not all be zero")])
def test_bad_weights(bert, weights, message):
    with pytest.raises(ValueError, match=message):
        aggregate_adapters(bert[0], None, weights=weights)


def test_overwrite_refusal_keeps_existing_files(bert, tmp_path):
    dirs, _ = bert
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty.*overwrite"):
        aggregate_adapters(dirs, out, tau=0.9)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    aggregate_adapters(dirs, out, tau=0.9, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary directory left behind
    (tmp_path / "d.safetensors").write_text("mine")
    with pytest.raises(ValueError, match="exists"):
        aggregate_adapters(dirs, tmp_path / "d.safetensors", delta=True)
    assert (tmp_path / "d.safetensors").read_text() == "mine"


# --- CLI ----------------------------------------------------------------------------------------

def test_cli_aggregate_report_and_loadable(bert, tmp_path, capsys):
    dirs, _ = bert
    out = tmp_path / "merged"
    rc = cli.main(["aggregate", str(dirs[0]), str(dirs[1]), "--weights", "1", "3", "--tau", "0.95", "-o", str(out),
                   "--report", "--json", str(tmp_path / "r.json")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "encoder.layer.1.attention.self.query" in text and "total (" in text
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    layers = lora_layers(peft.PeftModel.from_pretrained(tiny_bert(), out))
    assert {r["module"]: r["rank"] for r in rows} == {m: layer.r["default"] for m, layer in layers.items()}
    assert cli.main(["aggregate", str(dirs[0]), "--weights", "1", "2", "--report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fraq aggregate: error: ") and "weights has 2 entries" in err and err.count("\n") == 1


def tiny_llama(seed: int = 0):
    # 11 layers so that layers.1 and layers.10 both exist: a rank_pattern key for one must not reach the other
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=11,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.LlamaForCausalLM(cfg).eval()


def test_causal_lm_per_module_ranks_load_exactly(tmp_path):
    # A causal LM nests its decoder under `model.`; every module's rank differs at tau < 1, so the
    # written rank_pattern must reach each module, and only it, through peft's own matching.
    configs = [dict(r=2, lora_alpha=4), dict(r=6, lora_alpha=3, use_rslora=True)]
    dirs, refs = make_clients(tmp_path, tiny_llama, configs, ["q_proj", "v_proj", "down_proj"], seed=3)
    w = [1.0, 2.0]
    agg = aggregate_adapters(dirs, tmp_path / "out", weights=w, tau=0.9)
    assert len(set(agg.ranks.values())) > 1  # the config needs a rank_pattern
    model = peft.PeftModel.from_pretrained(tiny_llama(), tmp_path / "out")
    layers = lora_layers(model)
    assert set(layers) == set(refs[0])
    for m, layer in layers.items():
        assert layer.r["default"] == agg.ranks[m] and layer.scaling["default"] == 1.0, m
        B, A = agg.factors[m]
        assert rel(layer.get_delta_weight("default"), B.double() @ A.double()) < 16 * EPS32
        D = exact(refs, w, m)
        S = torch.linalg.svdvals(D)
        p = agg.ranks[m]
        # float64 arithmetic, float32 output: within float32 rounding of the Eckart-Young optimum
        opt = float(S[p:].square().sum().sqrt())
        err = float(torch.linalg.matrix_norm(B.double() @ A.double() - D))
        assert err == pytest.approx(opt, abs=100 * EPS32 * float(S[0])), m


def test_report_error_resolves_float32_rounding_at_tau_one(bert):
    # At tau = 1 the written float32 factors differ from Delta by float32 rounding only (~1e-8
    # relative); the report must measure that, not round it to 0. Both sides are float64 from
    # the same float32 factors, so they agree to eps64 / eps32 ~ 1e-9 relative, 1e3 times that here.
    dirs, refs = bert
    agg = aggregate_adapters(dirs, None, weights=WEIGHTS, tau=1.0)
    for row in agg.rows:
        B, A = agg.factors[row.module]
        assert B.dtype == torch.float32
        want = rel(B.double() @ A.double(), exact(refs, WEIGHTS, row.module))
        assert 0 < want < 100 * EPS32
        assert row.rel_error == pytest.approx(want, rel=1e3 * EPS64 / EPS32)
        assert row.energy == pytest.approx(1.0, abs=100 * EPS32)


def test_report_table_columns_align_with_many_clients(bert, tmp_path):
    dirs, _ = bert
    many = [shutil.copytree(d, tmp_path / f"c{k}_{j}") for j in range(4) for k, d in enumerate(dirs)]
    agg = aggregate_adapters(many, None, tau=0.9)  # 12 clients: a long "client ranks" entry
    lines = [ln for ln in agg.table().splitlines() if not ln.startswith("-")]
    assert len({len(ln) for ln in lines}) == 1, lines
