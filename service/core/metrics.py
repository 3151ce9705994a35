"""Prometheus metrics: jobs by status, queue depth and samples scored are read from the
store at scrape time (so every replica reports the same truth); job durations are
observed by the executor that saw the job end. One registry per app, so tests can
run several apps in one process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.core.status import QUEUED
from service.disk import KINDS, HistoryDisk
from service.store import JobRow, Store


class _StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        counts = self.store.count_by_status()
        jobs = GaugeMetricFamily("lctx_jobs", "Jobs by status", labels=["status"])
        for status, n in counts.items():
            jobs.add_metric([status], n)
        yield jobs
        yield GaugeMetricFamily("lctx_queue_depth", "Jobs waiting to run", value=counts[QUEUED])
        yield CounterMetricFamily("lctx_samples_scored", "Samples scored by started jobs",
                                  value=self.store.samples_scored())


class _DiskCollector(Collector):
    """The results folder's bytes, by kind and by task (service/disk.py; walked at most every few minutes)."""

    def __init__(self, results: Path) -> None:
        self.disk = HistoryDisk(results)

    def collect(self) -> Iterator[Metric]:
        disk = self.disk.read()
        if disk is None:  # the first walk is under way: no figure rather than a zero
            return
        total = GaugeMetricFamily("lctx_results_bytes", "Bytes of the results folder by kind (samples: per-sample "
                                  "records, what retention prunes; plots; results)", labels=["kind"])
        for kind in KINDS:
            total.add_metric([kind], disk.get(kind, 0))
        yield total
        per_task = GaugeMetricFamily("lctx_task_results_bytes", "Bytes of the results folder by task and kind",
                                     labels=["task", "kind"])
        for task, sizes in sorted(disk.get("tasks", {}).items()):
            for kind in KINDS:
                per_task.add_metric([task, kind], sizes[kind])
        yield per_task
        yield GaugeMetricFamily("lctx_result_folders", "Job folders in the results folder", value=disk.get("jobs", 0))


class Metrics:
    def __init__(self, store: Store, results: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(store))
        if results is not None:
            self.registry.register(_DiskCollector(results))
        self.job_duration = Histogram(
            "lctx_job_duration_seconds", "Wall time of finished jobs, first start to end",
            labelnames=["status"], registry=self.registry,
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 48 * 3600),
        )

    def observe_job(self, job: JobRow) -> None:
        if job.duration_s is not None:
            self.job_duration.labels(job.status).observe(job.duration_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
