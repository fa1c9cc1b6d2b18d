"""OrbitMQ benchmark: the same load shapes against OrbitMQ, RabbitMQ and NATS JetStream.

Run `python -m bench --help` (or `.venv/bin/python bench/run.py`, or `orbitmq bench all`). Results land in
bench/results/ as JSON and markdown. Nothing here is a test: numbers are reported, never asserted.
"""
