"""Dask scale-out of vtaforge.dse: a LocalCluster of 2 worker processes gives the same
results as the serial in-process run (the oracle is the serial run: the evaluations are
deterministic, only where they run changes)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.dse import DesignEvaluator, Space, parse_workloads, run_search
from vtaforge.dse.search import SearchStats
from vtaforge.hw.config import preset

pytest.importorskip("distributed")


def _summary(res):
    return [(r.point.params, r.verdict, r.result.workloads if r.result else None, r.pareto)
            for r in res]


def test_local_cluster_of_two_workers_matches_serial(tmp_path):
    sp = Space(preset("tiny"), {"LOG_ACC_BUFF_SIZE": [11, 12], "DSP_PACKING": [1, 2],
                                "LOG_BATCH": [0, 9]})
    wls = parse_workloads("resnet18-c2,c5", 4)
    serial = run_search(sp, wls, DesignEvaluator(), progress=False)
    st = SearchStats()
    par = run_search(sp, wls, DesignEvaluator(), progress=False, jobs=2, stats=st,
                     cache=tmp_path / "c.jsonl")
    assert st.workers == 2 and "LocalCluster" in st.executor
    # 4 valid points, 2 programs (packing shares) x 2 workloads = 4 evaluations
    assert st.perf_runs == 4 and st.perf_shared == 4
    assert _summary(par) == _summary(serial)
    assert sum(not r.point.valid for r in par) == 4


def test_cli_scheduler_address(tmp_path):
    from distributed import LocalCluster

    (tmp_path / "s.json").write_text(json.dumps(
        {"base": "tiny", "axes": {"LOG_ACC_BUFF_SIZE": [11, 12]}}))
    args = ["dse", "run", "--space", str(tmp_path / "s.json"), "--workloads", "resnet18-c2",
            "--size", "4", "--no-progress"]
    ref = CliRunner().invoke(main, args + ["-o", str(tmp_path / "a.json")])
    assert ref.exit_code == 0, ref.output
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cl:
        r = CliRunner().invoke(main, args + ["--scheduler", cl.scheduler_address,
                                             "-o", str(tmp_path / "b.json")])
    assert r.exit_code == 0, r.output
    assert f"Dask scheduler {cl.scheduler_address}" in r.stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert [p["workloads"] for p in a["points"]] == [p["workloads"] for p in b["points"]]
    assert a["best"] == b["best"]


@pytest.mark.parametrize("extra,msg", [
    (["--scheduler", "localhost:8786"], "error: --scheduler 'localhost:8786' must be an "
                                        "address such as tcp://host:8786"),
    (["--jobs", "2", "--scheduler", "tcp://x:1"], "error: --jobs and --scheduler are exclusive"),
])
def test_cli_parallel_errors(extra, msg):
    r = CliRunner().invoke(main, ["dse", "run", "--no-progress", "--perf", "none",
                                  "--samples", "1", *extra])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1].startswith(msg), r.stderr
