"""``MbenchNoopConnector``: the framework-cost baseline KV connector.

The minimal ``KVConnectorBase_V1`` subclass: every method does nothing or
returns the neutral value, so a run with it measures what vLLM's connector
plumbing costs (mixin hooks, metadata build and transport) with no transfer
work at all (the framework-cost baseline, ``noop_connector``). Use it with::

    --kv-transfer-config '{"kv_connector": "MbenchNoopConnector",
      "kv_connector_module_path": "mbench_vllm.noop", "kv_role": "kv_both"}'

The classes subclass the real vLLM bases, resolved when this module is
imported. Without vLLM, :func:`bind_bases` builds them on other bases (the
test stand-ins); either way they live at module level under their own names,
so ``MbenchNoopMetadata`` instances pickle (the multiproc executor pickles the
scheduler output, metadata included, to every worker).

Constructor: vLLM up to ~0.11 calls ``cls(vllm_config, role)``, later ones
``cls(vllm_config, role, kv_cache_config)`` (by keyword or position; on
main the base requires it). ``__init__`` forwards exactly what it was given.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MbenchNoopConnector", "MbenchNoopMetadata", "bind_bases"]

_IMPORT_ERROR: BaseException | None = None


def bind_bases(
    base: type, meta_base: type, hma_base: type | None = None
) -> tuple[type, type]:
    """Define both classes on the given bases and publish them here.

    ``hma_base`` is vLLM's ``SupportsHMA`` where it exists (main; base.py
    L85): the connector then also subclasses it, so vLLM's factory accepts
    it with the hybrid KV cache manager on (factory.py@a4cd9d0d L56-L62
    raises otherwise). Returns ``(MbenchNoopConnector, MbenchNoopMetadata)``.
    """
    bases = (base,) if hma_base is None else (base, hma_base)

    class MbenchNoopMetadata(meta_base):  # type: ignore[misc, valid-type]
        """Empty connector metadata (nothing to load or save)."""

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self)

        def __hash__(self) -> int:
            return 0

        def __repr__(self) -> str:
            return "MbenchNoopMetadata()"

    class MbenchNoopConnector(*bases):  # type: ignore[misc, valid-type]
        """KV connector that transfers nothing."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

        # ---- worker side -------------------------------------------------
        def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
            return None

        def wait_for_layer_load(self, layer_name: str) -> None:
            return None

        def save_kv_layer(
            self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any
        ) -> None:
            return None

        def wait_for_save(self) -> None:
            return None

        def get_finished(self, finished_req_ids: set[str]) -> tuple[None, None]:
            return None, None

        # ---- scheduler side ---------------------------------------------
        def get_num_new_matched_tokens(
            self, request: Any, num_computed_tokens: int
        ) -> tuple[int, bool]:
            return 0, False

        def update_state_after_alloc(
            self, request: Any, blocks: Any, num_external_tokens: int
        ) -> None:
            return None

        def build_connector_meta(self, scheduler_output: Any) -> MbenchNoopMetadata:
            return MbenchNoopMetadata()

        def request_finished(
            self, request: Any, block_ids: Any
        ) -> tuple[bool, dict[str, Any] | None]:
            return False, None

        # SupportsHMA: called instead of request_finished with the hybrid
        # KV cache manager on. False: vLLM frees the blocks itself.
        def request_finished_all_groups(
            self, request: Any, block_ids: Any
        ) -> tuple[bool, dict[str, Any] | None]:
            return False, None

    for cls in (MbenchNoopMetadata, MbenchNoopConnector):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    globals()["MbenchNoopMetadata"] = MbenchNoopMetadata
    globals()["MbenchNoopConnector"] = MbenchNoopConnector
    return MbenchNoopConnector, MbenchNoopMetadata


try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1 as _Base,
        KVConnectorMetadata as _MetaBase,
    )
except Exception as exc:  # no vLLM here (or a broken one): see bind_bases
    _IMPORT_ERROR = exc
else:
    try:  # vLLM main; absent up to ~0.11
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
            SupportsHMA as _HMA,
        )
    except Exception:
        _HMA = None
    bind_bases(_Base, _MetaBase, _HMA)


def __getattr__(name: str) -> Any:
    if name in ("MbenchNoopConnector", "MbenchNoopMetadata"):
        raise ImportError(
            f"mbench_vllm.noop.{name} subclasses vLLM's KVConnectorBase_V1, and "
            f"vLLM could not be imported ({_IMPORT_ERROR!r}); install vLLM or "
            "call mbench_vllm.noop.bind_bases(base, metadata_base) first"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
