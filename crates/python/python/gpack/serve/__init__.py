"""Serving gpack models from Python frameworks.

* :mod:`gpack.serve.ray`: a Ray Serve deployment with the OpenAI chat route
  (``pip install 'gpack[ray]'``).

For one machine, the ``gpack serve`` command is the server (batched
sequences, every OpenAI route, metrics, probes).
"""
