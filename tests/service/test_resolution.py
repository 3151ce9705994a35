"""The dry run's smallest resolvable difference (service/resolution.py): p(1-p) at p = 0.5 with
no earlier job, said so; the spread an earlier job of the checkpoint showed once there is one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evaluators.registry import parse_task
from service.cost import plan_job
from service.resolution import with_resolution
from service.store import Store
from tests.helpers import make_settings, passkey_run


def test_resolvable_difference_from_the_rule_then_from_an_earlier_job(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    try:
        tasks = [parse_task({"name": "passkey", "lengths": [256, 512], "trials": 100})]
        first = with_resolution(plan_job(tasks, settings, "fp"), store, settings, "fp", tasks).tasks[0]
        assert first.resolvable == pytest.approx(1.959964 * math.sqrt(0.5 / 100), rel=1e-5)
        assert "p(1-p) at p = 0.5" in first.resolution and "100 samples at a length" in first.resolution
        # a checkpoint that answers 95% right: its spread is far below p = 0.5's
        job = passkey_run(settings, store, {256: [1.0] * 95 + [0.0] * 5, 512: [1.0] * 95 + [0.0] * 5})
        later = with_resolution(plan_job(tasks, settings, "fp"), store, settings, "fp", tasks).tasks[0]
        sd = math.sqrt(0.95 * 0.05 * 200 / 199)
        assert later.resolvable == pytest.approx(1.959964 * math.sqrt(2 * sd * sd / 100), rel=1e-4)
        assert job in later.resolution and later.resolvable < first.resolvable
        assert plan_job(tasks, settings, "fp").as_dict()["tasks"][0]["resolvable"] is None  # the plan alone
    finally:
        store.close()
