"""The federated rounds as a Flower app (flwr 1.41 Message API).

:mod:`~fraq.federated.flower.strategy` (:class:`LoraStrategy`: ``configure_train`` sends
each client its own downlink, ``aggregate_train`` calls a :mod:`fraq.aggregators` method),
:mod:`~fraq.federated.flower.client_app` (the ``ClientApp``: local LoRA training with
:func:`fraq.federated.client.local_update`) and :mod:`~fraq.federated.flower.server_app`
(the ``ServerApp`` and :func:`run_simulation`). The rounds, seeds and arithmetic are the
in-process harness's, so a simulation reproduces :func:`fraq.federated.server.run_round`.

Simulation needs Flower's Ray backend: ``pip install "flwr[simulation]==1.41.*"``.
"""
