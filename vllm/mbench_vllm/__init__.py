"""mbench_vllm: the Python side of mbench installed next to vLLM.

* :mod:`mbench_vllm.plugin` — the ``mbench_steps`` general plugin that writes
  one ``engine_step.jsonl`` line per engine step (active when
  ``MBENCH_STEP_LOG`` is set).
* :mod:`mbench_vllm.noop` — ``MbenchNoopConnector``, the framework-cost
  baseline KV connector.
* :mod:`mbench_vllm.check` — ``python -m mbench_vllm.check``.

Importing this package never imports vLLM.
"""

__version__ = "0.1.0"
