"""A pytest plugin for runs whose end may never come (a time limit on a lent GPU): every
test's outcome, and a failure's report, appended to $PYTEST_STREAM as soon as it is known
(with xdist too: the controller hears each report). Usage: PYTHONPATH=bench pytest -p pytest_stream"""

import os


def pytest_runtest_logreport(report) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or (report.when != "call" and report.passed):
        return  # xdist workers hear their own reports too: only the controller writes
    with open(os.environ.get("PYTEST_STREAM", "pytest_stream.log"), "a") as f:
        f.write(f"{report.outcome.upper()} {report.nodeid} [{report.when}, {report.duration:.1f} s]\n")
        if report.failed:
            f.write(str(report.longrepr)[-2000:] + "\n\n")
