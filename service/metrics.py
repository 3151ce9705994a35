"""Prometheus metrics: jobs by status, queue depth and samples scored are read from the
store at scrape time (so every replica reports the same truth); job durations are
observed by the executor that saw the job end. One registry per app, so tests can
run several apps in one process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.status import QUEUED
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


class Metrics:
    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(store))
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
