"""MbenchNoopConnector against the connector base and factory stand-ins:
0.10 (``(vllm_config, role)``, factory @007c643b), 0.18 (``(vllm_config,
role, kv_cache_config=None)``, factory calls the old way for connectors that
do not name kv_cache_config) and main (base @003df296 requires
kv_cache_config; factory passes it). See tests/standins/*.py.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import subprocess
import sys

import pytest

from helpers import config, engine, fake_vllm, flush, read_lines, run_steps, shutdown
from standins import VERSIONS

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def _noop_module():
    import mbench_vllm.noop as noop

    return importlib.reload(noop)  # resolve the bases against the current fake vllm


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_subclasses_real_base_and_is_complete(step_log, version):
    ns = fake_vllm(VERSIONS[version])
    noop = _noop_module()
    assert issubclass(noop.MbenchNoopConnector, ns.KVConnectorBase_V1)
    assert issubclass(noop.MbenchNoopMetadata, ns.KVConnectorMetadata)
    assert not inspect.isabstract(noop.MbenchNoopConnector)
    Role = ns.KVConnectorRole
    cfg = config(connector="MbenchNoopConnector", module_path="mbench_vllm.noop")
    # Through vLLM's own factory call, both roles.
    for role in (Role.SCHEDULER, Role.WORKER):
        kw = {} if version == "0.10" else {"kv_cache_config": "kvcfg"}
        c = ns.KVConnectorFactory.create_connector(config=cfg, role=role, **kw)
        assert type(c) is noop.MbenchNoopConnector
        assert c.role is role and c._vllm_config is cfg
        if version == "main":
            assert c._kv_cache_config == "kvcfg"
        assert c.get_num_new_matched_tokens(object(), 0) == (0, False)
        assert c.get_finished({"r1"}) == (None, None)
        assert c.build_connector_meta(object()) == noop.MbenchNoopMetadata()
        assert c.request_finished(object(), [1, 2]) == (False, None)
        assert c.update_state_after_alloc(object(), object(), 0) is None
        for call in (lambda: c.start_load_kv(None), lambda: c.wait_for_layer_load("l0"),
                     lambda: c.save_kv_layer("l0", None, None), c.wait_for_save):
            assert call() is None


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_both_constructor_signatures(step_log, version):
    ns = fake_vllm(VERSIONS[version])
    noop = _noop_module()
    C, Role, cfg = noop.MbenchNoopConnector, ns.KVConnectorRole, config()
    if version == "0.10":
        c = C(cfg, Role.WORKER)
        assert c.role is Role.WORKER
        with pytest.raises(TypeError):  # the 0.10 base takes no third argument
            C(cfg, Role.WORKER, "kvcfg")
    else:
        for c in (C(cfg, Role.WORKER, "kvcfg"), C(vllm_config=cfg, role=Role.WORKER,
                                                   kv_cache_config="kvcfg")):
            assert c.role is Role.WORKER and c._kv_cache_config == "kvcfg"
        if version == "0.18":
            assert C(cfg, Role.SCHEDULER)._kv_cache_config is None
        else:
            with pytest.raises(TypeError):  # main requires kv_cache_config
                C(cfg, Role.SCHEDULER)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_engine_steps_with_noop(step_log, version):
    """The framework-cost baseline: connector hooks run and are timed."""
    ns = fake_vllm(VERSIONS[version])
    _noop_module()
    eng = engine(ns, config(connector="MbenchNoopConnector", module_path="mbench_vllm.noop"))
    run_steps(eng, 3)
    shutdown(eng)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 3
    for ln in lines:
        assert 0 <= ln["build_meta_us"] <= ln["schedule_us"]
        assert 0 <= ln["get_finished_us"] <= ln["execute_us"]


def test_metadata_pickles_in_process(step_log):
    ns = fake_vllm(VERSIONS["0.18"])
    noop = _noop_module()
    meta = noop.MbenchNoopConnector(config(), ns.KVConnectorRole.SCHEDULER).build_connector_meta(None)
    back = pickle.loads(pickle.dumps(meta, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is noop.MbenchNoopMetadata and back == meta
    assert isinstance(back, ns.KVConnectorMetadata)
    assert noop.MbenchNoopMetadata.__qualname__ == "MbenchNoopMetadata"
    assert noop.MbenchNoopMetadata.__module__ == "mbench_vllm.noop"


def test_bind_bases_without_vllm():
    """No vLLM: clear ImportError until bind_bases supplies the bases."""
    code = (
        "import sys, pickle\n"
        "import mbench_vllm.noop as noop\n"
        "try:\n"
        "    noop.MbenchNoopConnector\n"
        "except ImportError as e:\n"
        "    assert 'bind_bases' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('expected ImportError')\n"
        "from abc import ABC\n"
        "class B(ABC):\n"
        "    def __init__(self, vllm_config, role): self.role = role\n"
        "class M(ABC): pass\n"
        "C, Meta = noop.bind_bases(B, M)\n"
        "assert noop.MbenchNoopConnector is C and C('cfg', 'WORKER').role == 'WORKER'\n"
        "assert pickle.loads(pickle.dumps(Meta())) == Meta()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_metadata_pickles_across_processes(tmp_path):
    """Scheduler process pickles, a worker process unpickles: both import
    mbench_vllm.noop against (stand-in) vLLM at import time."""
    blob = tmp_path / "meta.pkl"
    prelude = (
        "import sys; sys.path[:0] = [%r, %r]\n"
        "from standins import VERSIONS, fake_vllm\n"
        "ns = fake_vllm(VERSIONS['0.18'])\n"
        "import pickle, mbench_vllm.noop as noop\n"
        "assert issubclass(noop.MbenchNoopConnector, ns.KVConnectorBase_V1)\n"
    ) % (PKG, HERE)
    dump = prelude + (
        "from helpers import config\n"
        "c = noop.MbenchNoopConnector(config(), ns.KVConnectorRole.SCHEDULER)\n"
        "m = c.build_connector_meta(None)\n"
        "open(%r, 'wb').write(pickle.dumps(m))\n"
    ) % str(blob)
    load = prelude + (
        "m = pickle.loads(open(%r, 'rb').read())\n"
        "assert type(m) is noop.MbenchNoopMetadata, type(m)\n"
        "assert isinstance(m, ns.KVConnectorMetadata)\n"
        "print('ok')\n"
    ) % str(blob)
    for code in (dump, load):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
