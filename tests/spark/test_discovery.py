"""Issue 15 item 3 / 17 item 1: `spark.read.format("orbitmq")` and `readStream.format("orbitmq")` resolve in a
fresh SparkSession with no register call and no PYSPARK_PYTHON, as a README user runs a script with the venv's
python. Needs the venv as ./dev sets it up: the clone installed with editable_mode=compat (so PySpark's lookup of
`pyspark_*` modules sees pyspark_orbitmq) and the venv's Spark pointed at the venv's python (conf/spark-env.sh)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOB = Path(__file__).with_name("discovery_job.py")


@pytest.mark.timeout(400)
def test_format_resolves_without_register_or_pyspark_python(mq: Any, helpers: Any, tmp_path: Path) -> None:
    topic = "SparkDiscovery"
    helpers.create_topic(mq.namesrv_addr, topic, 4)
    asyncio.run(helpers.produce(mq.namesrv_addr, topic, 0, 300, queues=4, batch=50))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    r = subprocess.run([sys.executable, str(JOB), mq.namesrv_addr, topic, str(tmp_path / "ckpt")], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=360, check=False)
    hint = ("(set-up: ./dev installs the clone with editable_mode=compat and writes the venv's "
            "pyspark/conf/spark-env.sh)")
    assert r.returncode == 0, f"{hint}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"batch": 300, "stream": 300, "orbitmq_imported": False}, out
