"""The federated rounds as a Flower app (flwr 1.41 Message API).

:mod:`~fraq.federated.flower.strategy` (:class:`LoraStrategy`: ``configure_train`` sends
each client its own downlink, ``aggregate_train`` calls a :mod:`fraq.aggregators` method),
:mod:`~fraq.federated.flower.client_app` (the ``ClientApp``: local LoRA training with
:func:`fraq.federated.client.local_update`) and :mod:`~fraq.federated.flower.server_app`
(the ``ServerApp`` and :func:`run_simulation`). The rounds, seeds and arithmetic are the
in-process harness's, so a simulation reproduces :func:`fraq.federated.round_loop.run_round`.

For ``flwr run``: ``server_app.app`` and ``client_app.app`` are the components of the Flower
App ``apps/flower/pyproject.toml``; they read ``context.run_config``, mapped by
:mod:`~fraq.federated.flower.run_config`. :mod:`~fraq.federated.flower.local` starts a
SuperLink (and SuperNodes) on this machine, runs the App and stops them. See docs/flower.md.

Simulation needs Flower's Ray backend: ``pip install "flwr[simulation]==1.41.*"``.
"""
